"""Import of existing chat histories: ChatGPT and Claude.ai exports, and forged's own JSON lines.

Each turn (a user message and the answer to it) becomes one interaction with the turn's own
time and an id derived from where it came from (a message's own id, else its position), so
importing the same file again adds nothing. The file is read as a stream, one conversation or
line at a time (ijson for exports: memory stays bounded by the largest conversation, not the
file), and pushed in chunks as it is read. A record that cannot be read, or a second copy of a
turn already read from the same file, is reported by its position (`$[3]...`, `line 12`) and
skipped; the rest goes on.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, NamedTuple, TextIO

import ijson
import msgspec

from forged.client.methods import Client
from forged.errors import BadRequest, ClientError, ForgedError, Unavailable, Unreachable
from forged.models import DEFAULT_SCOPE, Interaction

__all__ = [
    "CHATGPT_TEXT",
    "CHUNK",
    "CLAUDE_ROLES",
    "MAX_RETRIES",
    "PROGRESS_INTERVAL",
    "ImportReport",
    "Record",
    "import_file",
    "read_records",
]

CHUNK = 200  # turns per push: one durable commit each, well under any body limit
MAX_RETRIES = 30  # pushes retried while the daemon says it is busy (503 with Retry-After)
PROGRESS_INTERVAL = 0.2  # seconds between progress updates on a terminal
LOG_INTERVAL = 5.0  # seconds between progress lines when the output is a pipe or a file
READ_BUFFER = 64 * 1024  # bytes the JSON parser reads at a time
MAX_DEPTH = 64  # levels of nesting a conversation may hold (an export's hold about ten)
_OPEN, _CLOSE = ("start_map", "start_array"), ("end_map", "end_array")
_END = object()  # the array's end, told apart from a `null` in it
TOO_DEEP = object()  # an item nested deeper than MAX_DEPTH, passed over
CHATGPT_TEXT = ("text", "multimodal_text")  # content types whose `parts` hold what was said
CLAUDE_ROLES = {"human": "user", "assistant": "assistant"}
_KINDS = {
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}


class _Line(Interaction, forbid_unknown_fields=True):
    """A line of JSON lines: an interaction as pushed, or as `forged interactions --json` and
    `forged export` write it (with its `seq`, `received_at` and, in an export, its `type`)."""

    seq: int | None = None
    received_at: str | None = None
    type: str = "interaction"


class _Type(msgspec.Struct):
    """What a line is, read first: an export's summaries and facts are no interactions."""

    type: str = "interaction"


_DECODE_LINE = msgspec.json.Decoder(_Line)
_DECODE_TYPE = msgspec.json.Decoder(_Type)
_PUSHED = tuple(f for f in Interaction.__struct_fields__)  # the fields an interaction keeps


class Record(NamedTuple):
    """One turn read from a file, or the reason a part of the file could not be read."""

    where: str  # the position in the file: `$[3]` (a conversation), `line 12`
    interaction: Interaction | None
    problem: str = ""


class ImportReport(msgspec.Struct):
    """What an import did."""

    turns: int = 0
    accepted: int = 0
    duplicates: int = 0
    bad: list[str] = []  # `where: problem` for each record skipped


class _Bad(ForgedError):
    """A value of the file that is not what its format says: where it is, and what is wrong."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def _kind(value: Any) -> str:
    return _KINDS.get(type(value), type(value).__name__)


def _field(obj: dict[str, Any], key: str, where: str, *types: type) -> Any:
    """`obj[key]` when it is missing, null or one of `types`; else a `_Bad` naming its path."""
    value = obj.get(key)
    if value is None or (isinstance(value, types) and not isinstance(value, bool)):
        return value
    wanted = " or ".join(_KINDS[t] for t in types)
    raise _Bad(f"{where}.{key}", f"expected {wanted}, got {_kind(value)}")


def _turn_id(source: str, scope: str, *parts: str) -> str:
    """The same turn imported into the same scope always gets the same id."""
    digest = hashlib.sha256("\0".join((scope, *parts)).encode()).hexdigest()
    return f"{source}:{digest[:32]}"


def _epoch(value: Any, where: str) -> str | None:
    if value is None:
        return None
    try:
        moment = datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        raise _Bad(where, f"{value!r} is not a time forged can store") from None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _iso(value: Any) -> str | None:
    """An ISO 8601 time with a zone as given, or None when it is not one."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if parsed.tzinfo is not None else None


class _Message(NamedTuple):
    id: str
    role: str  # user or assistant
    text: str
    timestamp: str | None


def _turns(messages: Iterable[_Message]) -> Iterator[list[_Message]]:
    """Group a conversation into turns: each user message with the answers that follow it."""
    turn: list[_Message] = []
    for message in messages:
        if message.role == "user" and turn:
            yield turn
            turn = []
        turn.append(message)
    if turn:
        yield turn


def _interaction(
    source: str,
    scope: str,
    session: str,
    turn: list[_Message],
    fallback_time: str | None,
    metadata: dict[str, Any],
) -> Interaction:
    timestamp = next((m.timestamp for m in turn if m.timestamp), fallback_time)
    return msgspec.convert(
        {
            "id": _turn_id(source, scope, session, turn[0].id),
            "scope": scope,
            "session": session,
            "timestamp": timestamp,
            "messages": [{"role": m.role, "text": m.text} for m in turn],
            "metadata": {**metadata, "source": source, "message": turn[0].id},
        },
        Interaction,
    )


def _conversation(
    source: str,
    scope: str,
    where: str,
    session: str,
    messages: list[_Message],
    fallback_time: str | None,
    title: Any,
) -> Iterator[Record]:
    metadata = {"conversation": session, **({"title": title} if isinstance(title, str) else {})}
    for turn in _turns(messages):
        try:
            item = _interaction(source, scope, session, turn, fallback_time, metadata)
        except msgspec.ValidationError as exc:
            yield Record(f"{where} message {turn[0].id}", None, str(exc))
            continue
        yield Record(where, item)


def _key(conversation: dict[str, Any], where: str, *keys: str) -> str:
    """The conversation's own id, else its position: two without ids are two conversations."""
    for key in keys:
        if (value := _field(conversation, key, where, str, int)) not in (None, ""):
            return str(value)
    return where


def _chatgpt_text(message: dict[str, Any], where: str) -> str:
    content = _field(message, "content", where, dict) or {}
    kind = content.get("content_type")
    if kind in CHATGPT_TEXT:
        parts = _field(content, "parts", f"{where}.content", list) or []
        return "\n".join(p for p in parts if isinstance(p, str)).strip()
    if kind == "code":
        return str(_field(content, "text", f"{where}.content", str) or "").strip()
    return ""  # images, tool results, browsing, hidden context: not what was said


def _chatgpt_branch(conversation: dict[str, Any], where: str) -> list[tuple[str, dict[str, Any]]]:
    """The nodes of the branch the user last saw: from `current_node` back to the root."""
    mapping = _field(conversation, "mapping", where, dict)
    node = _field(conversation, "current_node", where, str)
    if mapping is None or node is None:
        raise _Bad(where, "no `mapping` tree with a `current_node`")
    branch, seen = [], set()
    while node is not None:
        if node in seen or node not in mapping:
            raise _Bad(where, f"the branch from `current_node` breaks at node {node!r}")
        seen.add(node)
        at = f"{where}.mapping[{node!r}]"
        if not isinstance(entry := mapping[node], dict):
            raise _Bad(at, f"expected an object, got {_kind(entry)}")
        branch.append((at, entry))
        node = _field(entry, "parent", at, str)
    return branch[::-1]


def _chatgpt_messages(conversation: dict[str, Any], where: str) -> Iterator[_Message]:
    for position, (at, node) in enumerate(_chatgpt_branch(conversation, where)):
        if (message := _field(node, "message", at, dict)) is None:
            continue
        at = f"{at}.message"
        role = _field(_field(message, "author", at, dict) or {}, "role", f"{at}.author", str)
        hidden = (_field(message, "metadata", at, dict) or {}).get(
            "is_visually_hidden_from_conversation"
        )
        if role not in ("user", "assistant") or hidden or not (text := _chatgpt_text(message, at)):
            continue
        own_id = _field(message, "id", at, str, int)
        created = _epoch(_field(message, "create_time", at, int, float), f"{at}.create_time")
        yield _Message(f"#{position}" if own_id is None else str(own_id), role, text, created)


def _chatgpt(conversation: dict[str, Any], where: str, scope: str) -> Iterator[Record]:
    messages = list(_chatgpt_messages(conversation, where))
    session = _key(conversation, where, "conversation_id", "id")
    started = _epoch(_field(conversation, "create_time", where, int, float), f"{where}.create_time")
    yield from _conversation(
        "chatgpt", scope, where, session, messages, started, conversation.get("title")
    )


def _claude_text(message: dict[str, Any], where: str) -> str:
    blocks = _field(message, "content", where, list) or []
    texts = [
        b["text"]
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    own = _field(message, "text", where, str)
    return ("\n".join(texts) if texts else own or "").strip()


def _claude_messages(chat: list[Any], where: str) -> Iterator[_Message]:
    for position, message in enumerate(chat):
        at = f"{where}.chat_messages[{position}]"
        if not isinstance(message, dict):
            raise _Bad(at, f"expected an object, got {_kind(message)}")
        sender = _field(message, "sender", at, str)
        if sender not in CLAUDE_ROLES or not (text := _claude_text(message, at)):
            continue
        own_id = _field(message, "uuid", at, str)
        created = _iso(message.get("created_at"))
        yield _Message(own_id or f"#{position}", CLAUDE_ROLES[sender], text, created)


def _claude(conversation: dict[str, Any], where: str, scope: str) -> Iterator[Record]:
    chat = _field(conversation, "chat_messages", where, list)
    if chat is None:
        raise _Bad(where, "no `chat_messages` list")
    messages = list(_claude_messages(chat, where))
    session = _key(conversation, where, "uuid")
    yield from _conversation(
        "claude",
        scope,
        where,
        session,
        messages,
        _iso(conversation.get("created_at")),
        conversation.get("name"),
    )


def _built(events: Iterator[tuple[str, Any]]) -> Iterator[Any]:
    """Each item of the top array, built from the parser's events; one nested deeper than
    MAX_DEPTH is passed over to its end and stands as TOO_DEEP. (ijson's own `items` keeps the
    path to every value as a string: 100,000 levels of nesting would take gigabytes.)"""
    stack: list[Any] = []  # the containers being built, innermost last
    keys: list[Any] = []  # the key each open object is at
    skip = 0  # levels still open of an item too deep
    for event, value in events:
        if skip:
            skip += event in _OPEN
            if event in _CLOSE and not (skip := skip - 1):
                yield TOO_DEEP
            continue
        if event == "map_key":
            keys[-1] = value
            continue
        if event in _OPEN:
            if len(stack) == MAX_DEPTH:
                skip, stack, keys = len(stack) + 1, [], []
                continue
            stack.append({} if event == "start_map" else [])
            keys.append(None)
            continue
        if event in _CLOSE:
            if not stack:
                return  # the end of the top array
            value = stack.pop()
            keys.pop()
        if not stack:
            yield value
        elif type(stack[-1]) is list:
            stack[-1].append(value)
        else:
            stack[-1][keys[-1]] = value


def _array_items(stream: IO[bytes]) -> Iterator[Any]:
    """The items of the JSON array the stream holds, one at a time."""
    events = ijson.basic_parse(stream, buf_size=READ_BUFFER, use_float=True)
    try:
        first = next(events, ("", None))
    except ijson.JSONError as exc:
        raise ClientError(f"the file is not JSON: {exc}") from None
    if first[0] != "start_array":
        raise ClientError("the file is not an export's conversations.json (a JSON array)")
    return _built(events)


def _exports(fmt: str, stream: IO[bytes], scope: str) -> Iterator[Record]:
    reader = _chatgpt if fmt == "chatgpt" else _claude
    items = _array_items(stream)
    index = 0
    while True:
        where = f"$[{index}]"
        try:
            conversation = next(items, _END)
        except ijson.JSONError as exc:
            yield Record(where, None, f"the file is not valid JSON from here on: {exc}")
            return
        if conversation is _END:
            return
        try:
            if conversation is TOO_DEEP:
                raise _Bad(where, f"nested deeper than {MAX_DEPTH} levels")
            if not isinstance(conversation, dict):
                raise _Bad(where, f"expected an object, got {_kind(conversation)}")
            yield from list(reader(conversation, where, scope))  # whole: bad means none of it
        except _Bad as bad:
            yield Record(bad.where, None, bad.problem)
        index += 1


def _jsonl(lines: Iterable[bytes], scope: str | None) -> Iterator[Record]:
    """forged's own shape, one interaction a line; an id is derived for lines without one."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            kind = _DECODE_TYPE.decode(line).type
            if kind != "interaction":  # an export's summaries and facts: made, not said
                yield Record(where, None, f"a {kind[:40]!r} line, not an interaction")
                continue
            line_item = _DECODE_LINE.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            yield Record(where, None, str(exc))
            continue
        item = Interaction(**{f: getattr(line_item, f) for f in _PUSHED})
        if scope is not None:
            item.scope = scope
        if item.id is None:
            item.id = _turn_id("jsonl", item.scope, hashlib.sha256(line.strip()).hexdigest())
        yield Record(where, item)


def _once(records: Iterable[Record]) -> Iterator[Record]:
    """Each turn once: a second copy in the same file is a skip at its own position. The ids
    read are kept as 128-bit digests, a few dozen bytes each."""
    seen: set[int] = set()
    for record in records:
        item = record.interaction
        if item is not None and item.id is not None:
            key = int.from_bytes(
                hashlib.blake2b(f"{item.scope}\0{item.id}".encode(), digest_size=16).digest()
            )
            if key in seen:
                yield Record(record.where, None, f"turn {item.id} was read before in this file")
                continue
            seen.add(key)
        yield record


def iter_records(fmt: str, stream: IO[bytes], scope: str | None = None) -> Iterator[Record]:
    """Every turn of a file in format `fmt` (chatgpt, claude, jsonl), and what could not be
    read, as the stream is read."""
    if fmt == "jsonl":
        return _once(_jsonl(stream, scope))
    return _once(_exports(fmt, stream, scope or DEFAULT_SCOPE))


def read_records(fmt: str, data: bytes, scope: str | None = None) -> list[Record]:
    """`iter_records` of a file held in memory."""
    return list(iter_records(fmt, io.BytesIO(data), scope))


class _Progress:
    """`importing: 1,200 turns, 12.0 of 50.0 MB (24%)`: rewritten in place on a terminal, a
    line every few seconds on a pipe or file (a log shows an import is alive, and how far)."""

    def __init__(self, size: int, out: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self.out = out
        self.terminal = out.isatty()
        self._interval = PROGRESS_INTERVAL if self.terminal else LOG_INTERVAL
        self._clock = clock
        self._last = clock()

    def update(self, turns: int, read: int, *, final: bool = False) -> None:
        if not final and self._clock() - self._last < self._interval:
            return
        if final and not self.terminal:
            return
        self._last = self._clock()
        percent = 100 * read // max(self.size, 1)
        line = (
            f"importing: {turns:,} turns, {read / 1e6:.1f} of {self.size / 1e6:.1f} MB ({percent}%)"
        )
        if self.terminal:
            print(f"\r{line}", end="", file=self.out, flush=True)
        else:
            print(line, file=self.out, flush=True)

    def done(self, turns: int) -> None:
        if self.terminal:
            self.update(turns, self.size, final=True)
            print(file=self.out)


def _push(
    client: Client, records: list[Record], report: ImportReport, err: TextIO, name: str
) -> None:
    """Push a chunk; on a 400 push its turns one by one to find and report the bad ones."""
    for attempt in range(MAX_RETRIES + 1):
        try:
            answer = client.push([r.interaction for r in records if r.interaction is not None])
        except Unavailable as exc:
            if exc.retry_after is None or attempt == MAX_RETRIES:
                raise
            time.sleep(exc.retry_after)
            continue
        except BadRequest as exc:
            if len(records) == 1:
                _skip(report, err, name, records[0].where, exc.message)
                return
            for record in records:
                _push(client, [record], report, err, name)
            return
        report.accepted += answer.accepted
        report.duplicates += answer.duplicates
        return


def _skip(report: ImportReport, err: TextIO, name: str, where: str, problem: str) -> None:
    report.bad.append(f"{where}: {problem}")
    print(f"forged: {name} {where}: {problem}; skipped", file=err, flush=True)


def _stopped(
    path: Path, report: ImportReport, chunk: list[Record], exc: ClientError
) -> ClientError:
    """The daemon went away: say what it acknowledged, and that importing again goes on."""
    return ClientError(
        f"{exc}; the import of {path.name} stopped at {chunk[0].where}:"
        f" {report.accepted} new turns and {report.duplicates} already stored were"
        f" acknowledged before, of {report.turns} read; import the file again to go on"
        " (what is stored is skipped)"
    )


def _open(path: Path) -> tuple[IO[bytes], int]:
    try:
        stream = open(path, "rb")  # noqa: SIM115  # closed by import_file
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror}") from exc
    return stream, os.fstat(stream.fileno()).st_size


def import_file(
    client: Client, fmt: str, path: Path, *, scope: str | None = None, err: TextIO = sys.stderr
) -> ImportReport:
    """Import a file as it is read: bad records are reported on `err` by position, the rest
    is stored; progress goes to `err` too."""
    report = ImportReport()
    stream, size = _open(path)
    with stream:
        progress = _Progress(size, err)
        chunk: list[Record] = []
        for record in iter_records(fmt, stream, scope):
            if record.interaction is None:
                _skip(report, err, path.name, record.where, record.problem)
            else:
                chunk.append(record)
                report.turns += 1
            if len(chunk) == CHUNK:
                _send(client, chunk, report, err, path)
                chunk = []
            progress.update(report.turns, stream.tell())
        if chunk:
            _send(client, chunk, report, err, path)
        progress.done(report.turns)
    print(
        f"imported {path.name}: {report.accepted} new turns, {report.duplicates} already"
        f" stored, {len(report.bad)} skipped"
    )
    return report


def _send(
    client: Client, chunk: list[Record], report: ImportReport, err: TextIO, path: Path
) -> None:
    try:
        _push(client, chunk, report, err, path.name)
    except (Unreachable, Unavailable) as exc:
        raise _stopped(path, report, chunk, exc) from exc
