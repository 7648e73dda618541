"""Distillers: the `Distiller` protocol and its OpenAI-compatible `/v1/chat/completions` client."""

from __future__ import annotations

import functools
import re
import ssl
import time
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import httpx
import msgspec
import structlog
import trio

from forged.config import DistillerConfig
from forged.errors import (
    ConfigError,
    ContextOverflow,
    InvalidAnswer,
    LLMUnavailable,
    UnsupportedMode,
)
from forged.llm.answer import count, decoded, parse_answer, parse_picks
from forged.llm.prompt import (
    ANSWER_SCHEMA,
    EXTRACTIVE_PROMPT,
    REPLACES_RULE,
    SYSTEM_PROMPT,
    guided_schema,
    known_ids,
    picks_schema,
    schema_hint,
    with_replaces,
)
from forged.models import DistilledMemory, Usage
from forged.text.tokens import estimate_tokens

__all__ = [
    "CONNECT_TIMEOUT",
    "MODES",
    "RETRY_WARMER",
    "TRUNCATION_MIN_TOKENS",
    "TRUNCATION_RATIO",
    "Distiller",
    "ModeMemory",
    "OpenAIDistiller",
    "Task",
]

MODES = ("json_schema", "json_object", "none")  # the order `auto` tries them in
CONNECT_TIMEOUT = 10.0  # seconds; a local server that does not accept by then is down
RETRY_WARMER = 0.3  # temperature added per attempt after the first, up to 1.0
TRUNCATION_MIN_TOKENS = 1024  # contexts are at least this large: smaller prompts are not cut
TRUNCATION_RATIO = 0.5  # reported prompt tokens below this share of our estimate: truncated
# An answer's body is read up to this many bytes per token it may hold (a token escaped in JSON,
# \uXXXX for each of its characters) and the envelope's; a larger body is refused, not held.
ANSWER_BYTES_PER_TOKEN = 64
ANSWER_ENVELOPE_BYTES = 65536
ERROR_TEXT_CHARS = 500  # of an error answer's body, quoted in the error
_OVERFLOW = re.compile(r"exceed_context_size|context (?:size|length|window)|too long|n_ctx", re.I)

log = structlog.get_logger(__name__)


class Distiller(Protocol):
    """Turns one transcript into a summary and typed facts; raises a `DistillError` if it can't.

    `attempt` counts the tries of this transcript: 1, then one more after each invalid answer.
    """

    model: str

    async def distill(self, transcript: str, *, attempt: int = 1) -> DistilledMemory: ...


class ModeMemory(Protocol):
    """Keeps the structured-output mode each endpoint accepted, so a restart does not probe again."""

    async def known_mode(self, endpoint: str) -> str | None: ...

    async def remember_mode(self, endpoint: str, mode: str) -> None: ...


class Task(NamedTuple):
    """A request other than distilling (consolidation): instructions and the answer's schema."""

    name: str  # the schema's name in json_schema mode
    system: str
    schema: dict[str, Any]
    guided: dict[str, Any]  # the schema with the bounds a grammar-enforcing server applies


class _Choice(msgspec.Struct):
    message: dict[str, Any]
    finish_reason: str | None = None


class _Usage(msgspec.Struct, frozen=True):
    prompt_tokens: Any = 0  # any JSON value: clamped by `count`, never trusted as an int
    completion_tokens: Any = 0


class _Completion(msgspec.Struct):
    choices: list[_Choice]
    usage: msgspec.Raw = msgspec.Raw(b"{}")  # read apart: a bad count must not cost the answer


def _usage(raw: msgspec.Raw) -> _Usage:
    """What an answer says it cost; nothing when that is no object of numbers (1e999 is none)."""
    try:
        return decoded(bytes(raw), _Usage, "a usage")
    except InvalidAnswer:
        return _Usage()


def _schema(config: DistillerConfig, transcript: str, *, bounded: bool) -> dict[str, Any]:
    """The answer's schema for the style; bounded for servers that generate by grammar."""
    if config.style == "extractive":
        return picks_schema(transcript, config, bounded=bounded)
    return guided_schema(config) if bounded else ANSWER_SCHEMA


def _task(config: DistillerConfig, transcript: str) -> Task:
    """Distilling as a task: the style's prompt and schemas for this transcript."""
    system = EXTRACTIVE_PROMPT if config.style == "extractive" else SYSTEM_PROMPT
    schema = _schema(config, transcript, bounded=False)
    guided = _schema(config, transcript, bounded=True)
    if ids := known_ids(transcript):  # known facts listed: a new fact may say what it replaces
        system += "\n" + REPLACES_RULE
        schema = with_replaces(schema, ids, bounded=False)
        guided = with_replaces(guided, ids, bounded=True)
    return Task("memory", system, schema, guided)


def _response_format(mode: str, task: Task) -> dict[str, Any] | None:
    if mode == "json_schema":
        schema = {"name": task.name, "strict": True, "schema": task.schema}
        return {"type": "json_schema", "json_schema": schema}
    if mode == "json_object":  # llama-server style: the schema becomes a grammar, bounds included
        return {"type": "json_object", "schema": task.guided}
    return None


def _error_text(status: int, text: str) -> str:
    return f"HTTP {status}: {text[:ERROR_TEXT_CHARS]}"


def answer_limit(max_tokens: int) -> int:
    """The most bytes an answer of at most `max_tokens` tokens can take, envelope included."""
    return max_tokens * ANSWER_BYTES_PER_TOKEN + ANSWER_ENVELOPE_BYTES


@functools.cache
def _tls() -> ssl.SSLContext:
    """The certificate store, loaded once a process: each load costs 0.2 s of a daemon's start."""
    return httpx.create_ssl_context()


def _verify(base_url: str) -> ssl.SSLContext | bool:
    """What checks the server's certificate: the store for an https:// server, or when a proxy
    from the environment may carry the requests (itself perhaps https://); plain HTTP to the
    server (a local model, the bundled one) has no certificate to check, so none is loaded."""
    if base_url.startswith("https://") or urllib.request.getproxies():
        return _tls()
    return False


class OpenAIDistiller:
    """A client of an OpenAI-compatible server (llama-server, Ollama, vLLM, OpenAI)."""

    def __init__(
        self,
        config: DistillerConfig,
        transport: httpx.AsyncBaseTransport | None = None,
        memory: ModeMemory | None = None,
    ):
        self.config = config
        self.model = config.model
        auto = config.structured_output == "auto"
        self._modes: tuple[str, ...] = MODES if auto else (config.structured_output,)
        self._memory = memory if auto else None  # a fixed mode needs no memory
        self._recalled = False  # whether the remembered mode was read yet
        self._learned = False  # whether a mode was learned that the memory does not hold
        headers = {}
        if config.api_key_file:
            headers["Authorization"] = f"Bearer {_read_key(config.api_key_file)}"
        self._client = httpx.AsyncClient(
            base_url=config.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(config.timeout, connect=CONNECT_TIMEOUT),
            limits=httpx.Limits(max_connections=4, max_keepalive_connections=2),
            transport=transport,
            verify=_verify(config.base_url),
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def distill(self, transcript: str, *, attempt: int = 1) -> DistilledMemory:
        """Ask the model; fall back to the next structured-output mode when one is rejected.

        A later attempt is asked warmer: at temperature 0 a model repeats the same broken answer.
        """
        temperature = min(1.0, self.config.temperature + RETRY_WARMER * (attempt - 1))
        await self._recall_mode()
        while True:
            try:
                memory = await self._complete(transcript, self._modes[0], temperature)
            except InvalidAnswer:
                await self._remember_mode()  # the server took the mode; the model answered badly
                raise
            except UnsupportedMode as exc:
                if len(self._modes) == 1:
                    raise InvalidAnswer(str(exc)) from exc
                log.warning("llm_mode_unsupported", mode=self._modes[0], next=self._modes[1])
                self._modes = self._modes[1:]  # remembered for this endpoint
                self._learned = True
                continue
            await self._remember_mode()
            return memory

    async def ask(self, task: Task, user: str) -> tuple[str, Usage]:
        """One answer to a task other than distilling: its content and cost, unparsed.

        The same endpoint, modes and fallback as `distill`; an answer cut off at max_tokens
        raises InvalidAnswer carrying its cost.
        """
        await self._recall_mode()
        while True:
            try:
                body = self._request(task, user, self._modes[0], self.config.temperature)
                content, finish, usage = await self._post(body, self._modes[0])
            except UnsupportedMode as exc:
                if len(self._modes) == 1:
                    raise InvalidAnswer(str(exc)) from exc
                log.warning("llm_mode_unsupported", mode=self._modes[0], next=self._modes[1])
                self._modes = self._modes[1:]
                self._learned = True
                continue
            await self._remember_mode()
            if finish == "length":
                raise InvalidAnswer(
                    "the answer was cut off at max_tokens", raw=content, usage=usage
                )
            return content, usage

    async def _recall_mode(self) -> None:
        """Start from the mode this endpoint accepted before a restart, if one is remembered."""
        if self._memory is None or self._recalled:
            return
        self._recalled = True
        mode = await self._memory.known_mode(self.config.base_url)
        if mode in self._modes:
            self._modes = self._modes[self._modes.index(mode) :]

    async def _remember_mode(self) -> None:
        if self._memory is not None and self._learned:
            self._learned = False
            await self._memory.remember_mode(self.config.base_url, self._modes[0])

    def _request(self, task: Task, user: str, mode: str, temperature: float) -> dict[str, Any]:
        system = task.system if mode != "none" else f"{task.system}\n{schema_hint(task.schema)}"
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
        if (response_format := _response_format(mode, task)) is not None:
            body["response_format"] = response_format
        return body

    async def _complete(self, transcript: str, mode: str, temperature: float) -> DistilledMemory:
        body = self._request(_task(self.config, transcript), transcript, mode, temperature)
        content, finish, usage = await self._post(body, mode)
        try:
            if finish == "length":
                raise InvalidAnswer("the answer was cut off at max_tokens", raw=content)
            if self.config.style == "extractive":
                return DistilledMemory("", [], usage, parse_picks(content, self.config))
            summary, facts = parse_answer(content, self.config)
        except InvalidAnswer as exc:
            exc.usage = usage  # the model did the work: account for it
            raise
        return DistilledMemory(summary=summary, facts=facts, usage=usage)

    async def _post(self, body: dict[str, Any], mode: str) -> tuple[str, str | None, Usage]:
        """Send one request: the answer's content, its finish reason and what it cost.

        The whole call, connect to last byte, has `timeout` seconds: a server that drips its
        answer is as unavailable as one that sends nothing.
        """
        started = time.perf_counter()
        answering: list[int] = []  # the status, once the server has begun to answer
        with trio.move_on_after(self.config.timeout) as deadline:
            status, data = await self._send(body, answering)
        if deadline.cancelled_caught and answering:  # it answers, too slowly: like a bad answer
            raise InvalidAnswer(
                f"the answer did not end within {self.config.timeout:g} s (timeout)"
            )
        if deadline.cancelled_caught:  # busy or down: waited for, like any unreachable server
            raise LLMUnavailable(f"no answer within {self.config.timeout:g} s (timeout)")
        ms = int((time.perf_counter() - started) * 1000)
        self._raise_for_status(status, data.decode("utf-8", "replace"), mode)
        completion = decoded(data, _Completion, "a chat completion")
        raw = data.decode("utf-8", "replace")
        if not completion.choices:
            raise InvalidAnswer("the answer is not a chat completion: no choices", raw=raw)
        choice = completion.choices[0]
        content = choice.message.get("content")
        if not isinstance(content, str | None):
            raise InvalidAnswer(
                "the answer is not a chat completion: content is no string", raw=raw
            )
        u = _usage(completion.usage)
        usage = Usage(count(u.prompt_tokens), count(u.completion_tokens), ms, 1)
        self._check_truncation(body, usage)
        return content or "", choice.finish_reason, usage

    async def _send(self, body: dict[str, Any], answering: list[int]) -> tuple[int, bytes]:
        """The status and body of one request (the status also put in `answering` once it
        arrives); a body past `answer_limit` is refused as it streams in, never held whole."""
        limit = answer_limit(self.config.max_tokens)
        data = bytearray()
        try:
            async with self._client.stream("POST", "chat/completions", json=body) as response:
                answering.append(response.status_code)
                # Past the limit, the next read is cancelled at the socket: the cancellation
                # ends every generator of the client's chain, as no break out of the loop would.
                with trio.CancelScope() as cut:
                    async for chunk in response.aiter_bytes():
                        data += chunk
                        if len(data) > limit:
                            cut.cancel()
        except httpx.TransportError as exc:  # connect, read, timeouts
            raise LLMUnavailable(f"{type(exc).__name__}: {exc or 'no answer'}") from exc
        if cut.cancelled_caught:
            raise InvalidAnswer(
                f"the answer is larger than {limit} bytes (max_tokens {self.config.max_tokens})",
                raw=data[:ERROR_TEXT_CHARS].decode("utf-8", "replace"),
            )
        return response.status_code, bytes(data)

    def _raise_for_status(self, status: int, text: str, mode: str) -> None:
        if status == 200:
            return
        if status in (400, 413, 500) and _OVERFLOW.search(text):
            raise ContextOverflow(_error_text(status, text), raw=text)
        if status in (400, 422, 500) and mode != "none" and "response_format" in text:
            raise UnsupportedMode(_error_text(status, text), raw=text)
        if status == 400:
            raise InvalidAnswer(
                f"the server refused the request: {_error_text(status, text)}", raw=text
            )
        raise LLMUnavailable(_error_text(status, text))  # 401/404 too: an operator can fix those

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
