"""Distillers: the `Distiller` protocol and its OpenAI-compatible `/v1/chat/completions` client."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import httpx
import msgspec
import structlog

from forged.config import DistillerConfig
from forged.errors import (
    ConfigError,
    ContextOverflow,
    InvalidAnswer,
    LLMUnavailable,
    UnsupportedMode,
)
from forged.models import FACT_KINDS, DistilledMemory, Fact, Usage
from forged.plugins import load_object, require_async
from forged.prompt import ANSWER_SCHEMA, SCHEMA_HINT, SYSTEM_PROMPT, guided_schema
from forged.tokens import estimate_tokens

MODES = ("json_schema", "json_object", "none")  # the order `auto` tries them in
CONNECT_TIMEOUT = 10.0  # seconds; a local server that does not accept by then is down
RETRY_WARMER = 0.3  # temperature added per failed try of the same transcript, up to 1.0
TRUNCATION_MIN_TOKENS = 1024  # contexts are at least this large: smaller prompts are not cut
TRUNCATION_RATIO = 0.5  # reported prompt tokens below this share of our estimate: truncated
_OVERFLOW = re.compile(r"exceed_context_size|context (?:size|length|window)|too long|n_ctx", re.I)
_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)
_CONTROL = re.compile(r"[\x00-\x1f]")  # raw newlines and tabs small models put inside strings

log = structlog.get_logger("forged.llm")


class Distiller(Protocol):
    """Turns one transcript into a summary and typed facts; raises a `DistillError` if it can't."""

    model: str

    async def distill(self, transcript: str) -> DistilledMemory: ...


class Task(NamedTuple):
    """What a model is asked to do: its instructions and the JSON shape of its answer."""

    name: str  # the schema's name in json_schema mode
    system: str
    schema: dict[str, Any]
    guided: dict[str, Any]  # the schema with the bounds a grammar-enforcing server applies
    schema_hint: str  # appended to the instructions where no structured output is asked for


class _RawFact(msgspec.Struct):
    kind: str
    text: str


class _Answer(msgspec.Struct):
    summary: str
    facts: list[_RawFact] = []


class _Choice(msgspec.Struct):
    message: dict[str, Any]
    finish_reason: str | None = None


class _Usage(msgspec.Struct, frozen=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Completion(msgspec.Struct):
    choices: list[_Choice]
    usage: _Usage = _Usage()


def extract_json(content: str) -> str:
    """The JSON object in an answer: bare, in markdown fences, or inside surrounding prose."""
    text = content.strip()
    if text.startswith("{"):
        return text
    if m := _FENCE.search(text):
        return m.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start == -1 or end < start:
        raise InvalidAnswer("the answer holds no JSON object", raw=content)
    return text[start : end + 1]


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def parse_answer(content: str, config: DistillerConfig) -> tuple[str, list[Fact]]:
    """Validate an answer and cap it: facts with no text or an unknown kind are dropped."""
    # A control character is never valid JSON; as a space it is harmless inside and outside strings.
    text = _CONTROL.sub(" ", extract_json(content))
    try:
        answer = msgspec.json.decode(text, type=_Answer)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidAnswer(f"the answer is not valid memory: {exc}", raw=content) from exc
    facts = [
        Fact(kind=f.kind, text=_clip(f.text, config.max_fact_chars))  # type: ignore[arg-type]
        for f in answer.facts
        if f.text.strip() and f.kind in FACT_KINDS
    ]
    return _clip(answer.summary, config.max_summary_chars), facts[: config.max_facts]


def _response_format(
    mode: str, name: str, schema: dict[str, Any], guided: dict[str, Any]
) -> dict[str, Any] | None:
    if mode == "json_schema":
        strict = {"name": name, "strict": True, "schema": schema}
        return {"type": "json_schema", "json_schema": strict}
    if mode == "json_object":  # llama-server style: the schema becomes a grammar, bounds included
        return {"type": "json_object", "schema": guided}
    return None


def _error_text(response: httpx.Response) -> str:
    return f"HTTP {response.status_code}: {response.text[:500]}"


class OpenAIDistiller:
    """A client of an OpenAI-compatible server (llama-server, Ollama, vLLM, OpenAI)."""

    def __init__(self, config: DistillerConfig, transport: httpx.AsyncBaseTransport | None = None):
        self.config = config
        self.model = config.model
        auto = config.structured_output == "auto"
        self._modes: tuple[str, ...] = MODES if auto else (config.structured_output,)
        self._failed: tuple[int, int] = (0, 0)  # (hash of a transcript, its invalid answers)
        headers = {}
        if config.api_key_file:
            headers["Authorization"] = f"Bearer {_read_key(config.api_key_file)}"
        self._client = httpx.AsyncClient(
            base_url=config.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(config.timeout, connect=CONNECT_TIMEOUT),
            limits=httpx.Limits(max_connections=4, max_keepalive_connections=2),
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def ask(
        self, task: Task, user: str, temperature: float | None = None
    ) -> tuple[str, Usage]:
        """One answer to another task than distilling (consolidation): its content and cost.

        The same endpoint, modes and fallback as `distill`; the caller parses the answer.
        """
        temperature = self.config.temperature if temperature is None else temperature
        while True:
            try:
                body = self._body(task, user, self._modes[0], temperature)
                content, finish, usage = await self._chat(body, self._modes[0])
            except UnsupportedMode as exc:
                if len(self._modes) == 1:
                    raise InvalidAnswer(str(exc)) from exc
                log.warning("llm_mode_unsupported", mode=self._modes[0], next=self._modes[1])
                self._modes = self._modes[1:]
                continue
            if finish == "length":
                raise InvalidAnswer(
                    "the answer was cut off at max_tokens", raw=content, usage=usage
                )
            return content, usage

    async def distill(self, transcript: str) -> DistilledMemory:
        """Ask the model; fall back to the next structured-output mode when one is rejected.

        A transcript asked again after an invalid answer is asked warmer: at temperature 0 a
        model repeats the same broken answer.
        """
        key = hash(transcript)
        failures = self._failed[1] if self._failed[0] == key else 0
        temperature = min(1.0, self.config.temperature + RETRY_WARMER * failures)
        while True:
            try:
                return await self._complete(transcript, self._modes[0], temperature)
            except InvalidAnswer:
                self._failed = (key, failures + 1)
                raise
            except UnsupportedMode as exc:
                if len(self._modes) == 1:
                    raise InvalidAnswer(str(exc)) from exc
                log.warning("llm_mode_unsupported", mode=self._modes[0], next=self._modes[1])
                self._modes = self._modes[1:]  # remembered for this endpoint

    def _body(self, task: Task, user: str, mode: str, temperature: float) -> dict[str, Any]:
        system = task.system if mode != "none" else f"{task.system}\n{task.schema_hint}"
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "temperature": temperature,
            "max_tokens": self.config.max_tokens,
            "stream": False,
            **self.config.request_extra,
        }
        response_format = _response_format(mode, task.name, task.schema, task.guided)
        if response_format is not None:
            body["response_format"] = response_format
        return body

    async def _complete(self, transcript: str, mode: str, temperature: float) -> DistilledMemory:
        task = Task("memory", SYSTEM_PROMPT, ANSWER_SCHEMA, guided_schema(self.config), SCHEMA_HINT)
        body = self._body(task, transcript, mode, temperature)
        content, finish, usage = await self._chat(body, mode)
        try:
            if finish == "length":
                raise InvalidAnswer("the answer was cut off at max_tokens", raw=content)
            summary, facts = parse_answer(content, self.config)
        except InvalidAnswer as exc:
            exc.usage = usage  # the model did the work: account for it
            raise
        return DistilledMemory(summary=summary, facts=facts, usage=usage)

    async def _chat(self, body: dict[str, Any], mode: str) -> tuple[str, str | None, Usage]:
        """Post one request: the answer's content, its finish reason and what it cost."""
        started = time.perf_counter()
        try:
            response = await self._client.post("chat/completions", json=body)
        except httpx.TransportError as exc:  # connect, read, timeouts
            raise LLMUnavailable(f"{type(exc).__name__}: {exc or 'no answer'}") from exc
        ms = int((time.perf_counter() - started) * 1000)
        self._raise_for_status(response, mode)
        try:
            completion = msgspec.json.decode(response.content, type=_Completion)
            choice = completion.choices[0]
            content = str(choice.message.get("content") or "")
        except (msgspec.DecodeError, msgspec.ValidationError, IndexError) as exc:
            raise InvalidAnswer(f"not a chat completion: {exc}", raw=response.text) from exc
        usage = Usage(completion.usage.prompt_tokens, completion.usage.completion_tokens, ms, 1)
        self._check_truncation(body, usage)
        return content, choice.finish_reason, usage

    def _raise_for_status(self, response: httpx.Response, mode: str) -> None:
        status, text = response.status_code, response.text
        if status == 200:
            return
        if status in (400, 413, 500) and _OVERFLOW.search(text):
            raise ContextOverflow(_error_text(response), raw=text)
        if status in (400, 422, 500) and mode != "none" and "response_format" in text:
            raise UnsupportedMode(_error_text(response), raw=text)
        if status == 400:
            raise InvalidAnswer(
                f"the server refused the request: {_error_text(response)}", raw=text
            )
        raise LLMUnavailable(_error_text(response))  # 401/404 too: an operator can fix those

    def _check_truncation(self, body: dict[str, Any], usage: Usage) -> None:
        estimate = sum(estimate_tokens(m["content"]) for m in body["messages"])
        if estimate < TRUNCATION_MIN_TOKENS:
            return  # small prompts: a server's prompt cache makes its count look low
        if usage.prompt_tokens and usage.prompt_tokens < estimate * TRUNCATION_RATIO:
            log.warning(
                "llm_prompt_truncated",
                prompt_tokens=usage.prompt_tokens,
                estimated_tokens=estimate,
                hint="the server may have cut the prompt to fit its context; raise its context size",
            )


def _read_key(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"distiller.api_key_file: cannot read {path}: {exc.strerror}") from exc


def make_distiller(config: DistillerConfig) -> Distiller:
    """The distiller named by `[distiller] class`, or the OpenAI-compatible client."""
    if not config.class_:
        return OpenAIDistiller(config)
    key, spec = "distiller.class", config.class_
    distiller: Distiller = load_object(spec, key)(config)
    model = getattr(distiller, "model", None)
    if not isinstance(model, str) or not model:
        raise ConfigError(f"{key}: {spec} has no `model` (a non-empty str naming the model)")
    require_async(distiller, "distill", key, spec)
    return distiller
