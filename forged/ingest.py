"""Ingest: a request body becomes scrubbed interactions, committed together with concurrent pushes."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from forged.config import ServerConfig
from forged.errors import InvalidRequest, StoreError
from forged.hub import Batcher
from forged.models import Accepted, Interaction, Message, NewInteraction
from forged.scrub import scrub
from forged.store import Store, now, utc_timestamp
from forged.tokens import estimate_tokens

JSON_TYPES = {"", "application/json", "application/x-www-form-urlencoded", "text/json"}
NDJSON_TYPES = {"application/x-ndjson", "application/jsonl", "application/x-jsonlines"}
GROUP_MAX_REQUESTS = 64  # requests committed in one transaction at most
MAX_DEPTH = 64  # nesting levels allowed in metadata: deeper JSON would exhaust the stack
QUEUE_CAPACITY = 256  # requests waiting for the committer
OFFLOAD_CHARS = 256 * 1024  # scrub bigger requests in a worker thread, off the event loop
OFFLOAD_BYTES = 256 * 1024  # decode bigger bodies in a worker thread, off the event loop

_ONE = msgspec.json.Decoder(Interaction)
_MANY = msgspec.json.Decoder(list[Interaction])
_JSON = msgspec.json.Encoder()
_AT = re.compile(r"^(?P<problem>.*) - at `(?P<at>[^`]*)`$")


def _invalid(exc: msgspec.ValidationError | msgspec.DecodeError, where: str = "") -> InvalidRequest:
    """A 400 naming where the problem is (`$[3].messages[0].text`) and what it is."""
    text = str(exc)
    if m := _AT.match(text):
        text = f"{m['at']}: {m['problem']}"
    return InvalidRequest(400, "invalid_body", f"{where}{text}")


def _too_deep(where: str = "") -> InvalidRequest:
    return InvalidRequest(400, "invalid_body", f"{where}the JSON is nested too deeply")


def _decode_json(body: bytes) -> list[Interaction]:
    try:
        if body.lstrip()[:1] == b"[":
            return _MANY.decode(body)
        return [_ONE.decode(body)]
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _invalid(exc) from exc
    except RecursionError:  # msgspec's own depth guard
        raise _too_deep() from None


def _decode_ndjson(body: bytes) -> list[Interaction]:
    items = []
    for number, line in enumerate(body.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            items.append(_ONE.decode(line))
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise _invalid(exc, f"line {number}: ") from exc
        except RecursionError:
            raise _too_deep(f"line {number}: ") from None
    return items


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in a decoded JSON value (iteratively: no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        value, level = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        if isinstance(value, dict | list) and children:
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in children)
    return deepest


def _check_limits(items: list[Interaction], limits: ServerConfig) -> None:
    for i, item in enumerate(items):
        at = f"$[{i}]" if len(items) > 1 else "$"
        if _depth(item.metadata) > MAX_DEPTH:
            raise InvalidRequest(400, "invalid_body", f"{at}.metadata: nested deeper than "
                                 f"{MAX_DEPTH} levels")  # fmt: skip
        if len(item.messages) > limits.max_messages:
            raise InvalidRequest(
                400,
                "invalid_body",
                f"{at}.messages: {len(item.messages)} "
                f"messages, at most {limits.max_messages} allowed",
            )
        for j, message in enumerate(item.messages):
            if len(message.text) > limits.max_text_chars:
                raise InvalidRequest(
                    400,
                    "invalid_body",
                    f"{at}.messages[{j}].text: "
                    f"{len(message.text)} characters, at most "
                    f"{limits.max_text_chars} allowed",
                )


def parse_body(body: bytes, content_type: str, limits: ServerConfig) -> list[Interaction]:
    """Decode and validate a push body (one object, an array, or NDJSON) or raise InvalidRequest."""
    media = content_type.split(";")[0].strip().lower()
    if media in NDJSON_TYPES:
        items = _decode_ndjson(body)
    elif media in JSON_TYPES:
        if not body.strip():
            raise InvalidRequest(400, "invalid_body", "the body is empty; send an interaction")
        items = _decode_json(body)
    else:
        raise InvalidRequest(
            415,
            "unsupported_media_type",
            f"Content-Type {media!r} is not "
            "supported; send application/json or application/x-ndjson",
        )
    if not items:
        raise InvalidRequest(400, "invalid_body", "the body holds no interactions")
    _check_limits(items, limits)
    return items


async def read_body(body: bytes, content_type: str, limits: ServerConfig) -> list[Interaction]:
    """`parse_body`, in a worker thread for a large body: the event loop keeps serving meanwhile."""
    if len(body) <= OFFLOAD_BYTES:
        return parse_body(body, content_type, limits)
    return await trio.to_thread.run_sync(parse_body, body, content_type, limits)


def _scrub_value(value: Any) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [_scrub_value(v) for v in value]
    if isinstance(value, dict):
        return {scrub(str(k)): _scrub_value(v) for k, v in value.items()}
    return value


def _timestamp(value: str | None, received_at: str) -> str:
    if value is None:
        return received_at
    try:
        return utc_timestamp(value)
    except ValueError as exc:
        raise InvalidRequest(400, "invalid_body", f"timestamp: {value!r} {exc}") from None


def prepare(item: Interaction, received_at: str) -> NewInteraction:
    """Scrub every string of an interaction and encode it for the log."""
    messages = [
        Message(role=m.role, text=scrub(m.text), name=scrub(m.name) if m.name else None)
        for m in item.messages
    ]
    return NewInteraction(
        client_id=scrub(item.id) if item.id else None,
        scope=scrub(item.scope),
        session=scrub(item.session) if item.session else None,
        timestamp=_timestamp(item.timestamp, received_at),
        received_at=received_at,
        tokens=sum(estimate_tokens(m.text) for m in messages),
        messages=_JSON.encode(messages),
        metadata=_JSON.encode(_scrub_value(item.metadata)) if item.metadata else None,
    )


def _prepare_all(items: list[Interaction], received_at: str) -> list[NewInteraction]:
    return [prepare(item, received_at) for item in items]


class _Pending:
    """A request waiting for the group commit."""

    def __init__(self, rows: list[NewInteraction]) -> None:
        self.rows = rows
        self.done = trio.Event()
        self.accepted = 0
        self.last_seq = 0
        self.error: StoreError | None = None


class Ingest:
    """Commits pushes: concurrent requests share one transaction, each is kept whole or not at all."""

    def __init__(self, store: Store, on_appended: Callable[[], None]) -> None:
        self.store = store
        self._on_appended = on_appended
        self._send, self._receive = trio.open_memory_channel[_Pending](QUEUE_CAPACITY)
        self.queued = 0  # interactions of requests taken and not yet answered

    async def push(self, items: list[Interaction]) -> Accepted:
        """Store the interactions durably; return only after COMMIT."""
        self.queued += len(items)  # before any checkpoint: the backlog check counts them at once
        try:
            received_at = now()
            if sum(len(m.text) for i in items for m in i.messages) > OFFLOAD_CHARS:
                rows = await trio.to_thread.run_sync(_prepare_all, items, received_at)
            else:
                rows = _prepare_all(items, received_at)
            pending = _Pending(rows)
            await self._send.send(pending)
            await pending.done.wait()
        finally:
            self.queued -= len(items)
        if pending.error is not None:
            raise pending.error
        return Accepted(pending.accepted, len(rows) - pending.accepted, pending.last_seq)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The group committer: take what is queued, commit it in one transaction, wake waiters."""
        batcher = Batcher(self._receive, max_items=GROUP_MAX_REQUESTS)
        task_status.started()
        while True:
            group = await batcher.next()
            try:
                accepted = await self.store.append([p.rows for p in group])
            except StoreError as exc:
                for p in group:
                    p.error = exc
            else:
                for p, count in zip(group, accepted, strict=True):
                    p.accepted, p.last_seq = count, self.store.last_seq
                self._on_appended()
            for p in group:
                p.done.set()
