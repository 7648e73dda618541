"""A fake OpenAI-compatible LLM server on loopback that tests can make slow, wrong or absent."""

from __future__ import annotations

import argparse
import collections
import html
import re
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import h11
import msgspec
import trio

# What the daemon asks for; "schema_echo" sends it back when the request carries none.
from forged.llm.prompt import ANSWER_SCHEMA

HOST = "127.0.0.1"  # loopback only: the fake is never reachable from elsewhere
DEFAULT_PORT = 8089  # standalone default, so benchmarks can point at a fixed URL
MAX_READ = 65536  # bytes per receive; request bodies arrive in as many chunks as needed
FACT_TEXT_CHARS = 60  # how much of an interaction's first line a fact quotes
TRUNCATE_INTO_STRING = 10  # characters kept past the opening quote of the first fact's text
WHITESPACE_TAIL = "\n" + " " * 7  # repeated after the JSON for the "whitespace" behaviour
WHITESPACE_REPEAT = 2000  # 16,000 characters of trailing whitespace
SEQ_TAG = re.compile(r'<interaction seq="(\d+)"[^>]*>')  # how the daemon marks an interaction
INTERACTION_END = "</interaction>"  # closes an interaction's transcript in the prompt
LINE_PREFIX = re.compile(r"^\[(\d+)\.(\d+)\] ")  # the daemon's id before every transcript line
EXTRACTIVE_MARK = '{"lines": '  # the extractive prompt shows the answer's shape with this
OVERFLOW_MESSAGE = "the request exceeds the available context size, try increasing it"
N_CTX = 4096  # context size the overflow errors report, as llama-server does
# Behaviours that answer 200 with some content; the rest answer with an error or not at all.
CONTENT_BEHAVIOURS = frozenset(
    {"ok", "prose", "fence", "whitespace", "truncated", "truncated_stop", "length"}
    | {"schema_echo", "wrong_shape", "unknown_kind", "garbage", "empty", "gold", "copy"}
)
# "raw" sends what `FakeLLM.raw` makes of the request: any bytes a hostile server would send.
BEHAVIOURS = CONTENT_BEHAVIOURS | {"overflow400", "overflow500", "hang", "raw"}  # "status:<code>"
RAW_CHUNK = 1 << 20  # bytes per send of a raw body given as chunks
# Error type and message per status, shaped like llama-server's error bodies.
STATUS_ERRORS: dict[int, tuple[str, str]] = {
    429: ("rate_limit_error", "Too many requests"),
    500: ("server_error", "Internal server error"),
    503: ("unavailable_error", "Loading model"),
}
# Consolidation requests list facts as "[id N] (kind, date) text" between <facts> tags.
FACT_LINE = re.compile(r"^\[id (\d+)\] \((\w+), ([^)]*)\) (.*)$", re.M)
FACTS_OPEN = "<facts>"
SUBJECT_WORDS = 3  # facts whose first words agree are about the same thing
# Distillation requests may list known facts as "[fact N] (kind, date) text" between these tags.
KNOWN_FACT = re.compile(r"^\[fact (\d+)\] \((\w+), ([^)]*)\) (.*)$", re.M)
KNOWN_OPEN = "<known_facts>"
# Condensation requests list summaries as "[dates] text" between these tags.
SUMMARIES_OPEN = "<summaries>"
SUMMARY_LINE = re.compile(r"^\[[^\]]*\] (.*)$", re.M)
SUPERSEDING = frozenset({"state", "preference", "correction"})  # kinds that replace known facts
SPEAKER = re.compile(r"^(?:[^:]{1,40}: )+")  # speakers and labels before what was said

_encoder = msgspec.json.Encoder()
_WORD = re.compile(r"\w+")


def is_behaviour(name: str) -> bool:
    """Tell whether `name` is a behaviour the fake knows."""
    code = name.removeprefix("status:")
    return name in BEHAVIOURS or (code != name and code.isdigit() and 100 <= int(code) < 600)


def _prompt_text(body: dict[str, Any]) -> str:
    """All message contents of a request, plain strings and text parts alike."""
    texts = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [p.get("text", "") for p in content if isinstance(p, dict)]
    return "\n".join(t for t in texts if isinstance(t, str))


def _last_message(body: dict[str, Any]) -> str:
    """The request's last message: what it asks about (the system prompt holds examples)."""
    return _prompt_text({"messages": (body.get("messages") or [{}])[-1:]})


def _blocks(text: str) -> list[tuple[int, list[str]]]:
    """Each tagged interaction's seq and non-empty lines, in prompt order, once per seq."""
    found: dict[int, list[str]] = {}
    for match in SEQ_TAG.finditer(text):
        transcript = text[match.end() :].split(INTERACTION_END, 1)[0]
        transcript = SEQ_TAG.split(transcript, 1)[0]
        lines = [line.strip() for line in transcript.splitlines() if line.strip()]
        found.setdefault(int(match.group(1)), [LINE_PREFIX.sub("", line) for line in lines])
    return list(found.items())


def _interactions(text: str) -> list[tuple[int, str]]:
    """Each tagged interaction's seq and first non-empty line, in prompt order, once per seq."""
    return [(seq, lines[0] if lines else "") for seq, lines in _blocks(text)]


def gold_key(text: str) -> str:
    """A turn's words, folded: the key under which the "gold" behaviour finds its facts."""
    return " ".join(_WORD.findall(text.casefold()))


def gold_answer(body: dict[str, Any], gold: dict[str, list[dict[str, str]]]) -> dict[str, Any]:
    """The facts `gold` holds for the turns of the prompt: an interaction whose text ends with
    a key's words gets that key's facts. The summary is the facts in one paragraph."""
    facts = []
    for _, lines in _blocks(_last_message(body)):  # not the prompt's example
        words = " " + gold_key(" ".join(lines))
        facts += [f for key, found in gold.items() if words.endswith(" " + key) for f in found]
    return {"summary": " ".join(f["text"] for f in facts), "facts": facts}


def envelope(content: str, prompt_tokens: Any = 10, completion_tokens: Any = 10) -> bytes:
    """A chat completion holding `content`, with the usage given (any JSON value): the body a
    "raw" behaviour starts from."""
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": "stop",
    }
    return _encoder.encode({"object": "chat.completion", "choices": [choice], "usage": usage})


def _quote(line: str) -> str:
    """The start of a line, without trailing stops so the fact ends in exactly one."""
    return line[:FACT_TEXT_CHARS].rstrip(" .")


def answer_for(body: dict[str, Any]) -> dict[str, Any]:
    """The valid, deterministic answer to a completion request: one fact per tagged seq.

    Facts quote each interaction's first line and the summary joins them, so both are grounded
    in the transcript. Asked to pick lines (the extractive prompt), it picks each first line.
    """
    text = _prompt_text(body)
    found = _interactions(_last_message(body))  # not the prompt's example
    if EXTRACTIVE_MARK in text:
        return {"lines": [{"line": f"{seq}.1", "kind": "state"} for seq, _ in found]}
    if not found:
        fact = {"kind": "state", "text": "A conversation was recorded."}
        return {"summary": "The conversation was recorded.", "facts": [fact]}
    facts = [{"kind": "state", "text": f"Recorded: {_quote(line)}."} for _, line in found]
    summary = "Recorded exchanges: " + "; ".join(_quote(line) for _, line in found) + "."
    return {"summary": summary, "facts": facts}


def consolidation_answer(body: dict[str, Any]) -> dict[str, Any]:
    """The deterministic consolidation of the listed facts: facts whose first SUBJECT_WORDS
    words agree are about the same thing. Among them, one whose words are all in another's is
    merged into the one with more words (ties: the lower id); then the latest (by date, then
    id) supersedes the rest."""
    subjects: dict[str, list[tuple[str, int, set[str]]]] = {}
    for m in FACT_LINE.finditer(_last_message(body).split(FACTS_OPEN, 1)[-1]):
        words = gold_key(m.group(4)).split()
        subject = " ".join(words[:SUBJECT_WORDS])
        subjects.setdefault(subject, []).append((m.group(3), int(m.group(1)), set(words)))
    changes = []
    for facts in subjects.values():
        kept: list[tuple[str, int, set[str]]] = []
        for fact in sorted(facts, key=lambda f: (-len(f[2]), f[1])):
            twin = next((k for k in kept if fact[2] <= k[2]), None)
            if twin is None:
                kept.append(fact)
                continue
            changes.append(
                {
                    "action": "merge",
                    "fact": fact[1],
                    "into": twin[1],
                    "reason": f"says the same as fact {twin[1]}",
                }
            )
        kept.sort(key=lambda f: (f[0], f[1]))
        latest_at, latest, _ = kept[-1]
        reason = f"replaced on {latest_at} by fact {latest}"
        changes += [
            {"action": "supersede", "fact": old, "into": latest, "reason": reason}
            for _, old, _ in kept[:-1]
        ]
    return {"changes": changes}


def _words(text: str) -> list[str]:
    """What a fact or line says, folded, without a speaker in front."""
    return gold_key(SPEAKER.sub("", text)).split()


def replaced(kind: str, text: str, known: dict[int, str]) -> list[int]:
    """The known facts a new one replaces, deterministically: a state, preference or correction
    replaces those about the same subject (first SUBJECT_WORDS words) unless one's words are all
    in the other's (a near-duplicate, left for consolidation to merge)."""
    if kind not in SUPERSEDING:
        return []
    new = _words(text)
    ids = []
    for id_, old_text in known.items():
        old = _words(old_text)
        same = old[:SUBJECT_WORDS] == new[:SUBJECT_WORDS]
        if same and not (set(old) <= set(new) or set(new) <= set(old)):
            ids.append(id_)
    return ids


def _with_replaces(answer: dict[str, Any], message: str) -> dict[str, Any]:
    """The answer with each fact's or picked line's `replaces`, when known facts are listed."""
    known = {int(m.group(1)): m.group(4) for m in KNOWN_FACT.finditer(message)}
    lines = {f"{seq}.{n}": line for seq, ls in _blocks(message) for n, line in enumerate(ls, 1)}
    key = "facts" if "facts" in answer else "lines"
    items = [
        {**i, "replaces": replaced(i["kind"], i.get("text") or lines.get(i["line"], ""), known)}
        for i in answer[key]
    ]
    return {**answer, key: items}


def copy_answer(body: dict[str, Any]) -> dict[str, Any]:
    """A model that copies: each interaction's first line, whole and as written, is a fact,
    and all of them together the summary (the daemon clips what is too long)."""
    found = _interactions(_last_message(body))
    facts = [{"kind": "event", "text": SPEAKER.sub("", line)} for _, line in found]
    return {"summary": " ".join(f["text"] for f in facts), "facts": facts}


def _valid(behaviour: str, body: dict[str, Any], gold: dict[str, Any]) -> dict[str, Any]:
    """The valid answer the behaviours start from: consolidation, gold facts or the default."""
    message = _last_message(body)
    if FACTS_OPEN in message:
        return consolidation_answer(body)
    if SUMMARIES_OPEN in message:  # condensed: the summaries' texts, oldest first, in one
        listed = message.split(SUMMARIES_OPEN, 1)[1]
        said = " ".join(html.unescape(m.group(1)) for m in SUMMARY_LINE.finditer(listed))
        return {"summary": said}
    if behaviour == "copy" and EXTRACTIVE_MARK not in _prompt_text(body):
        return copy_answer(body)
    answer = gold_answer(body, gold) if behaviour == "gold" else answer_for(body)
    return _with_replaces(answer, message) if KNOWN_OPEN in message else answer


def _echoed_schema(body: dict[str, Any]) -> Any:
    """The JSON schema a request carried (OpenAI or llama-server form), else the daemon's."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        inner = fmt.get("json_schema")
        if isinstance(inner, dict) and "schema" in inner:
            return inner["schema"]
        if "schema" in fmt:
            return fmt["schema"]
    return ANSWER_SCHEMA


def _content(
    behaviour: str, body: dict[str, Any], gold: dict[str, list[dict[str, str]]]
) -> tuple[str, str]:
    """Message content and finish_reason for a behaviour that answers 200."""
    valid = _valid(behaviour, body, gold)
    facts = valid.get("facts", valid.get("lines", valid.get("changes", [])))  # none: a summary
    answer = _encoder.encode(valid).decode()
    key = '"text":"' if '"text":"' in answer else '"line":"'
    at = answer.find(key)  # an answer with nothing to remember has neither: cut it in half
    cut = at + len(key) + TRUNCATE_INTO_STRING if at >= 0 else len(answer) // 2  # inside a string
    contents = {
        "ok": answer,
        "gold": answer,
        "copy": answer,
        "length": answer,
        "prose": f"Sure! Here is the JSON you asked for:\n{answer}\nLet me know if that helps.",
        "fence": f"```json\n{answer}\n```",
        "whitespace": answer + WHITESPACE_TAIL * WHITESPACE_REPEAT,
        "truncated": answer[:cut],
        "truncated_stop": answer[:cut],
        "schema_echo": _encoder.encode(_echoed_schema(body)).decode(),
        "wrong_shape": _encoder.encode({"memories": facts}).decode(),
        "unknown_kind": _encoder.encode(
            {"summary": "Odd kinds.", "facts": [{**f, "kind": "opinion"} for f in facts]}
        ).decode(),
        "garbage": "I am sorry, but I cannot produce that. As an AI language model I ramble.",
        "empty": "",
    }
    return contents[behaviour], "length" if behaviour in {"truncated", "length"} else "stop"


def _error(behaviour: str, prompt_tokens: int) -> tuple[int, dict[str, Any]]:
    """Status and body for a behaviour that answers with an HTTP error."""
    if behaviour.startswith("overflow"):
        code = int(behaviour.removeprefix("overflow"))
        error = {"code": code, "message": OVERFLOW_MESSAGE, "type": "exceed_context_size_error"}
        return code, {"error": error | {"n_prompt_tokens": prompt_tokens, "n_ctx": N_CTX}}
    code = int(behaviour.removeprefix("status:"))
    kind, message = STATUS_ERRORS.get(code, ("server_error", f"Error {code}"))
    return code, {"error": {"code": code, "message": message, "type": kind}}


def _rejection(status: int, fmt_type: str) -> dict[str, Any]:
    """How servers that cannot do a response_format type refuse it."""
    if status == 500:  # llama-cpp-python's server: a pydantic validation error, as a 500
        message = (
            "1 validation error for CreateChatCompletionRequest\nresponse_format\n"
            f"  Input tag '{fmt_type}' found using 'type' does not match any of the expected tags"
        )
        return {"error": {"message": message, "type": "internal_server_error"}}
    message = f"response_format: unsupported type '{fmt_type}'"
    return {"error": {"code": status, "message": message, "type": "invalid_request_error"}}


def _json_response(status: int, body: Any, *, close: bool) -> tuple[h11.Response, bytes]:
    """An h11 response head and its JSON payload."""
    payload = _encoder.encode(body)
    headers = [("content-type", "application/json"), ("content-length", str(len(payload)))]
    if close:
        headers.append(("connection", "close"))
    return h11.Response(status_code=status, headers=headers), payload


async def _read_request(
    stream: trio.SocketStream, conn: h11.Connection
) -> tuple[h11.Request, bytes] | None:
    """The next whole request on a connection, or None once the client has gone."""
    request, body = None, bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(MAX_READ))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage) and request is not None:
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            return None


async def _until_closed(stream: trio.SocketStream) -> None:
    """Wait, answering nothing, until the client closes the connection."""
    while await stream.receive_some(MAX_READ):
        pass


class FakeLLM:
    """An OpenAI-compatible chat completions server whose behaviour tests switch at will."""

    def __init__(self, *, port: int = 0, latency: float = 0.0, model: str = "fake-model") -> None:
        self.latency = latency  # seconds of simulated model time before each completion answer
        self.gate: trio.Event | None = None  # when set to an Event, answers wait until it is set
        self.model = model  # listed by /v1/models
        self.script: collections.deque[str] = collections.deque()  # one behaviour per call
        self.default = "ok"  # behaviour once the script is empty
        self.poison: str | None = None  # prompts containing this get poison_behaviour
        self.poison_behaviour = "overflow400"
        self.reject_response_formats: set[str] = set()  # response_format types refused
        self.reject_status = 500  # 500 like llama-cpp-python's server, or 400
        self.prompt_tokens_factor = 1.0  # below 1 simulates a server truncating silently
        self.gold: dict[str, list[dict[str, str]]] = {}  # "gold": facts by gold_key(turn text)
        self.requests: list[dict[str, Any]] = []  # every decoded completion request body
        # "raw": the whole response body for a request, as bytes or an iterable of chunks
        # (sent chunked, so a body of gigabytes is never held); `drip` seconds between bytes.
        self.raw: Callable[[dict[str, Any]], bytes | Iterable[bytes]] = lambda body: b"{}"
        self.drip = 0.0
        self.raw_sent = 0  # bytes of raw bodies sent whole (a client that hung up stops it)
        self.raw_cut = 0  # raw bodies the client stopped reading before their end
        self.calls = 0
        self._port = port
        self._changed = trio.Event()  # set and replaced whenever calls or in-flight work change
        self._in_flight = 0
        self._listener: trio.SocketListener | None = None
        self._idle: set[trio.SocketStream] = set()  # keep-alive connections between requests
        self._nursery: trio.Nursery | None = None

    @property
    def port(self) -> int:
        """The port served on (0 until serve() has bound)."""
        return self._port

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL: the daemon posts to `{base_url}/chat/completions`."""
        return f"http://{HOST}:{self._port}/v1"

    @property
    def in_flight(self) -> int:
        """Completion requests received and not yet answered (hanging ones included)."""
        return self._in_flight

    @property
    def down(self) -> bool:
        """Whether the fake is in an outage (not listening)."""
        return self._listener is None

    async def wait_until(self, condition: Callable[[FakeLLM], bool]) -> None:
        """Return once `condition(self)` holds, checked after every call and every answer."""
        while not condition(self):
            await self._changed.wait()

    async def wait_for_calls(self, n: int) -> None:
        """Return once at least `n` completion requests have arrived."""
        await self.wait_until(lambda llm: llm.calls >= n)

    async def go_down(self) -> None:
        """Stop listening, so new connections are refused, and close idle keep-alive ones."""
        if self._listener is not None:
            listener, self._listener = self._listener, None
            await listener.aclose()
        for stream in list(self._idle):
            await stream.aclose()

    async def come_back(self) -> None:
        """Listen again on the same port after go_down()."""
        if self._listener is None:
            await self._listen()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on loopback and serve until cancelled; started() once listening."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(trio.sleep_forever)  # an outage must not end serve()
                await self._listen()
                task_status.started()
        finally:
            if self._listener is not None:
                with trio.CancelScope(shield=True):
                    await self._listener.aclose()

    async def _listen(self) -> None:
        assert self._nursery is not None, "serve() is not running"
        (listener,) = await trio.open_tcp_listeners(self._port, host=HOST)
        self._port = listener.socket.getsockname()[1]
        self._listener = listener
        self._nursery.start_soon(self._accept, listener)

    async def _accept(self, listener: trio.SocketListener) -> None:
        assert self._nursery is not None
        while True:
            try:
                stream = await listener.accept()
            except trio.ClosedResourceError:  # go_down() closed the listener
                return
            self._nursery.start_soon(self._serve_connection, stream)

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        async with stream:
            try:
                while not self.down:
                    self._idle.add(stream)
                    try:
                        got = await _read_request(stream, conn)
                    finally:
                        self._idle.discard(stream)
                    if got is None or not await self._respond(stream, conn, *got):
                        return
                    conn.start_next_cycle()
            except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
                return  # the client went away or spoke bad HTTP: just drop the connection

    async def _respond(
        self, stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes
    ) -> bool:
        """Answer one request; False when the connection must close."""
        target, method = request.target.split(b"?")[0], request.method
        if target == b"/v1/chat/completions" and method == b"POST":
            answer = await self._complete(stream, body)
            if answer is None:
                return False
            status, payload = answer
        elif target == b"/v1/models" and method == b"GET":
            status, payload = 200, {"object": "list", "data": [self._model_entry()]}
        elif target in {b"/v1/chat/completions", b"/v1/models"}:
            status, payload = 405, {"error": {"code": 405, "message": "Method not allowed"}}
        else:
            status, payload = 404, {"error": {"code": 404, "message": "Not found"}}
        head, data = _json_response(status, payload, close=self.down)
        await stream.send_all(conn.send(head) + conn.send(h11.Data(data=data)))
        await stream.send_all(conn.send(h11.EndOfMessage()))
        return conn.our_state is not h11.MUST_CLOSE

    def _model_entry(self) -> dict[str, Any]:
        return {"id": self.model, "object": "model", "created": 0, "owned_by": "fakellm"}

    async def _complete(self, stream: trio.SocketStream, raw: bytes) -> tuple[int, Any] | None:
        """Status and body for one completion request; None after a hang ends."""
        try:
            body = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return 400, {"error": {"code": 400, "message": "Request body is not JSON"}}
        if not isinstance(body, dict):
            return 400, {"error": {"code": 400, "message": "Request body is not an object"}}
        self.requests.append(body)
        self.calls += 1
        self._in_flight += 1
        self._notify()
        try:
            return await self._behave(stream, body)
        finally:
            self._in_flight -= 1
            self._notify()

    async def _behave(
        self, stream: trio.SocketStream, body: dict[str, Any]
    ) -> tuple[int, Any] | None:
        text = _prompt_text(body)
        prompt_tokens = int(len(text) / 4 * self.prompt_tokens_factor)
        fmt = body.get("response_format")
        fmt_type = fmt.get("type") if isinstance(fmt, dict) else None
        if fmt_type in self.reject_response_formats:  # validation fails before any model work
            return self.reject_status, _rejection(self.reject_status, str(fmt_type))
        behaviour = self._pick(text)
        if behaviour == "hang":
            await _until_closed(stream)
            return None
        if behaviour == "raw":
            await self._send_raw(stream, self.raw(body))
            return None
        if self.gate is not None:
            await self.gate.wait()
        await trio.sleep(self.latency)
        if behaviour not in CONTENT_BEHAVIOURS:
            return _error(behaviour, prompt_tokens)
        content, finish = _content(behaviour, body, self.gold)
        return 200, self._completion(body, content, finish, prompt_tokens)

    async def _send_raw(self, stream: trio.SocketStream, body: bytes | Iterable[bytes]) -> None:
        """A 200 with `body`, chunked, dripped byte by byte when `drip` is set; the connection
        closes after it. A client that stops reading is counted in `raw_cut`."""
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        head += b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        chunks = [body] if isinstance(body, bytes) else body
        try:
            await stream.send_all(head)
            for chunk in chunks:
                pieces = [chunk[i : i + 1] for i in range(len(chunk))] if self.drip else [chunk]
                for piece in pieces:
                    await stream.send_all(b"%x\r\n%s\r\n" % (len(piece), piece))
                    if self.drip:
                        await trio.sleep(self.drip)  # the behaviour itself: a dripping server
            await stream.send_all(b"0\r\n\r\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.raw_cut += 1
            return
        self.raw_sent += 1

    def _pick(self, text: str) -> str:
        """This call's behaviour; the poison marker wins without consuming the script."""
        if self.poison is not None and self.poison in text:
            behaviour = self.poison_behaviour
        else:
            behaviour = self.script.popleft() if self.script else self.default
        if not is_behaviour(behaviour):  # a typo in a test must fail loudly, not look like a 500
            raise ValueError(f"fakellm: unknown behaviour {behaviour!r}")
        return behaviour

    def _completion(
        self, body: dict[str, Any], content: str, finish: str, prompt_tokens: int
    ) -> dict[str, Any]:
        completion_tokens = len(content) // 4
        return {
            "id": f"chatcmpl-fake-{self.calls}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": finish,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


async def _serve_forever(llm: FakeLLM) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(llm.serve)
        print(llm.base_url, flush=True)


def main(argv: list[str] | None = None) -> None:
    """Serve a fake LLM until interrupted, printing its base URL once listening."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.fakellm", description=__doc__)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per completion")
    parser.add_argument("--default", default="ok", help="behaviour of every completion")
    parser.add_argument("--prompt-tokens-factor", type=float, default=1.0)
    args = parser.parse_args(argv)
    if not is_behaviour(args.default):
        parser.error(f"unknown behaviour {args.default!r}")
    llm = FakeLLM(port=args.port, latency=args.latency)
    llm.default = args.default
    llm.prompt_tokens_factor = args.prompt_tokens_factor
    try:
        trio.run(_serve_forever, llm)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
