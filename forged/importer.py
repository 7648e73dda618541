"""Import of existing chat histories: ChatGPT and Claude.ai exports, and forged's own JSON lines.

Each turn (a user message and the answer to it) becomes one interaction with the turn's own
time and an id derived from where it came from, so importing the same file again adds nothing.
A record that cannot be read is reported by its position and skipped; the rest goes on.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import msgspec

from forged.client import Client
from forged.errors import BadRequest, ClientError, Unavailable
from forged.models import DEFAULT_SCOPE, Interaction

CHUNK = 200  # turns per push: one durable commit each, well under any body limit
MAX_RETRIES = 30  # pushes retried while the daemon says it is busy (503 with Retry-After)
PROGRESS_INTERVAL = 0.2  # seconds between progress updates on a terminal
CHATGPT_TEXT = ("text", "multimodal_text")  # content types whose `parts` hold what was said
CLAUDE_ROLES = {"human": "user", "assistant": "assistant"}

_DECODE_LINE = msgspec.json.Decoder(Interaction)


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


def _turn_id(source: str, scope: str, *parts: str) -> str:
    """The same turn imported into the same scope always gets the same id."""
    digest = hashlib.sha256("\0".join((scope, *parts)).encode()).hexdigest()
    return f"{source}:{digest[:32]}"


def _epoch(value: Any) -> str | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    moment = datetime.fromtimestamp(value, UTC)
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


def _interaction(source: str, scope: str, session: str, turn: list[_Message],
                 fallback_time: str | None, metadata: dict[str, Any]) -> Interaction:  # fmt: skip
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


def _conversation(source: str, scope: str, where: str, session: str,
                  messages: list[_Message], fallback_time: str | None,
                  title: Any) -> Iterator[Record]:  # fmt: skip
    metadata = {"conversation": session, **({"title": title} if isinstance(title, str) else {})}
    for turn in _turns(messages):
        try:
            item = _interaction(source, scope, session, turn, fallback_time, metadata)
        except msgspec.ValidationError as exc:
            yield Record(f"{where} message {turn[0].id}", None, str(exc))
            continue
        yield Record(where, item)


def _chatgpt_text(message: dict[str, Any]) -> str:
    content = message.get("content") or {}
    kind = content.get("content_type")
    if kind in CHATGPT_TEXT:
        return "\n".join(p for p in content.get("parts") or [] if isinstance(p, str)).strip()
    if kind == "code":
        return str(content.get("text") or "").strip()
    return ""  # images, tool results, browsing, hidden context: not what was said


def _chatgpt_branch(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages of the branch the user last saw: from `current_node` back to the root."""
    mapping, node = conversation.get("mapping"), conversation.get("current_node")
    if not isinstance(mapping, dict) or not isinstance(node, str):
        raise ValueError("no `mapping` tree with a `current_node`")
    branch, seen = [], set()
    while node is not None:
        if node in seen or node not in mapping:
            raise ValueError(f"the branch from `current_node` breaks at node {node!r}")
        seen.add(node)
        branch.append(mapping[node])
        node = mapping[node].get("parent")
    return [n["message"] for n in reversed(branch) if isinstance(n.get("message"), dict)]


def _chatgpt(data: Any, scope: str) -> Iterator[Record]:
    for i, conversation in enumerate(_conversations(data)):
        where = f"$[{i}]"
        try:
            branch = _chatgpt_branch(conversation)
        except (ValueError, AttributeError) as exc:
            yield Record(where, None, str(exc))
            continue
        session = str(conversation.get("conversation_id") or conversation.get("id") or where)
        messages = [
            _Message(str(m.get("id")), role, text, _epoch(m.get("create_time")))
            for m in branch
            if (role := (m.get("author") or {}).get("role")) in ("user", "assistant")
            and not (m.get("metadata") or {}).get("is_visually_hidden_from_conversation")
            and (text := _chatgpt_text(m))
        ]
        yield from _conversation("chatgpt", scope, where, session, messages,
                                 _epoch(conversation.get("create_time")),
                                 conversation.get("title"))  # fmt: skip


def _claude_text(message: dict[str, Any]) -> str:
    blocks = message.get("content") or []
    texts = [b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"
             and isinstance(b.get("text"), str)]  # fmt: skip
    return ("\n".join(texts) if texts else str(message.get("text") or "")).strip()


def _claude(data: Any, scope: str) -> Iterator[Record]:
    for i, conversation in enumerate(_conversations(data)):
        where = f"$[{i}]"
        chat = conversation.get("chat_messages")
        if not isinstance(chat, list):
            yield Record(where, None, "no `chat_messages` list")
            continue
        messages = [
            _Message(str(m.get("uuid")), CLAUDE_ROLES[str(m.get("sender"))], text,
                     _iso(m.get("created_at")))
            for m in chat
            if isinstance(m, dict) and m.get("sender") in CLAUDE_ROLES and (text := _claude_text(m))
        ]  # fmt: skip
        session = str(conversation.get("uuid") or where)
        yield from _conversation("claude", scope, where, session, messages,
                                 _iso(conversation.get("created_at")),
                                 conversation.get("name"))  # fmt: skip


def _conversations(data: Any) -> Iterator[dict[str, Any]]:
    if not isinstance(data, list):
        raise ClientError("the file is not an export's conversations.json (a JSON array)")
    for conversation in data:
        yield conversation if isinstance(conversation, dict) else {}


def _jsonl(lines: list[bytes], scope: str | None) -> Iterator[Record]:
    """forged's own shape, one interaction a line; an id is derived for lines without one."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            item = _DECODE_LINE.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            yield Record(where, None, str(exc))
            continue
        if scope is not None:
            item.scope = scope
        if item.id is None:
            item.id = _turn_id("jsonl", item.scope, hashlib.sha256(line.strip()).hexdigest())
        yield Record(where, item)


def read_records(fmt: str, data: bytes, scope: str | None = None) -> list[Record]:
    """Every turn of a file in format `fmt` (chatgpt, claude, jsonl), and what could not be read."""
    if fmt == "jsonl":
        return list(_jsonl(data.split(b"\n"), scope))
    try:
        decoded = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise ClientError(f"the file is not JSON: {exc}") from exc
    reader = _chatgpt if fmt == "chatgpt" else _claude
    return list(reader(decoded, scope or DEFAULT_SCOPE))


class _Progress:
    """`importing: 1,200 of 5,000 turns` on a terminal, rewritten in place; silent otherwise."""

    def __init__(self, total: int, out: TextIO) -> None:
        self.total = total
        self.out = out
        self.shown = out.isatty()
        self._last = 0.0

    def update(self, done: int) -> None:
        if self.shown and (
            time.monotonic() - self._last >= PROGRESS_INTERVAL or done == self.total
        ):
            self._last = time.monotonic()
            percent = 100 * done // max(self.total, 1)
            print(f"\rimporting: {done:,} of {self.total:,} turns ({percent}%)", end="",
                  file=self.out, flush=True)  # fmt: skip

    def done(self) -> None:
        if self.shown:
            print(file=self.out)


def _push(client: Client, records: list[Record], report: ImportReport) -> None:
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
                report.bad.append(f"{records[0].where}: {exc.message}")
                return
            for record in records:
                _push(client, [record], report)
            return
        report.accepted += answer.accepted
        report.duplicates += answer.duplicates
        return


def import_file(client: Client, fmt: str, path: Path, *, scope: str | None = None,
                err: TextIO = sys.stderr) -> ImportReport:  # fmt: skip
    """Import a file: bad records are reported on `err` by position, the rest is stored."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror}") from exc
    records = read_records(fmt, data, scope)
    report = ImportReport()
    report.bad = [f"{r.where}: {r.problem}" for r in records if r.interaction is None]
    turns = [r for r in records if r.interaction is not None]
    progress = _Progress(len(turns), err)
    for start in range(0, len(turns), CHUNK):
        _push(client, turns[start : start + CHUNK], report)
        progress.update(min(start + CHUNK, len(turns)))
    progress.done()
    report.turns = len(turns)
    for problem in report.bad:
        print(f"forged: {path.name} {problem}; skipped", file=err)
    print(f"imported {path.name}: {report.accepted} new turns, {report.duplicates} already"
          f" stored, {len(report.bad)} skipped")  # fmt: skip
    return report
