"""Ingest: a request body becomes scrubbed interactions, committed together with concurrent pushes."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

import msgspec
import trio

from forged.config import ServerConfig
from forged.errors import InvalidRequest, StoreError, located
from forged.models import Accepted, Interaction, Message
from forged.scrub.scan import redacted, scrub_all, secret_key_kind
from forged.store.backend import Backend
from forged.store.records import NewInteraction
from forged.text.tokens import estimate_tokens
from forged.timestamps import latest_timestamp, now, utc_timestamp

__all__ = [
    "BACKLOG_RETRY_AFTER",
    "GROUP_MAX_REQUESTS",
    "JSON_TYPES",
    "LINGER_MAX",
    "LINGER_SHARE",
    "MAX_DEPTH",
    "NDJSON_TYPES",
    "OFFLOAD_BYTES",
    "OFFLOAD_CHARS",
    "QUEUE_CAPACITY",
    "Ingest",
    "parse_body",
    "prepare_all",
    "read_body",
]

JSON_TYPES = {"", "application/json", "application/x-www-form-urlencoded", "text/json"}
NDJSON_TYPES = {"application/x-ndjson", "application/jsonl", "application/x-jsonlines"}
BACKLOG_RETRY_AFTER = 5  # seconds a client is told to wait when the backlog is full
GROUP_MAX_REQUESTS = 64  # requests committed in one transaction at most
LINGER_SHARE = 0.5  # a group waits for late requests at most this share of the last commit's time
LINGER_MAX = 0.002  # seconds: and never longer than this
MAX_DEPTH = 64  # nesting levels allowed in metadata: deeper JSON would exhaust the stack
QUEUE_CAPACITY = 256  # requests waiting for the committer
# Past these, a request is scrubbed and decoded in a worker thread, off the event loop: a
# 256 KB turn scrubbed on the loop held every other client up for tens of milliseconds, and
# below 32 KB the work takes about what the hop to a thread costs.
OFFLOAD_CHARS = 32 * 1024
OFFLOAD_BYTES = 32 * 1024

_ONE = msgspec.json.Decoder(Interaction)
_MANY = msgspec.json.Decoder(list[Interaction])
_JSON = msgspec.json.Encoder()
_KIND = re.compile(r"\[REDACTED:([a-z0-9_]+)\]")  # the kind a marker names


def _not_json(exc: msgspec.DecodeError, data: bytes, where: str) -> str:
    """Say that the bytes are not JSON, and where they break (msgspec may not say)."""
    text = str(exc)
    if text == "Input data was truncated":
        text = f"it ends at byte {len(data.rstrip())} before the JSON value is complete"
    subject = f"{where}not valid JSON" if where else "the body is not valid JSON"
    return f"{subject}: {text.removeprefix('JSON is malformed: ')}"


def _invalid(
    exc: msgspec.ValidationError | msgspec.DecodeError, data: bytes, where: str = ""
) -> InvalidRequest:
    """An invalid body, named where the problem is (`$[3].messages[0].text`) and what it is."""
    if not isinstance(exc, msgspec.ValidationError):
        return InvalidRequest("invalid_body", _not_json(exc, data, where))
    problem, at = located(str(exc))
    text = problem if at is None else f"{at}: {problem}"
    return InvalidRequest("invalid_body", f"{where}{text}")


def _too_deep(where: str = "") -> InvalidRequest:
    return InvalidRequest("invalid_body", f"{where}the JSON is nested too deeply")


def _decode_json(body: bytes) -> list[Interaction]:
    try:
        if body.lstrip()[:1] == b"[":
            return _MANY.decode(body)
        return [_ONE.decode(body)]
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _invalid(exc, body) from exc
    except RecursionError:  # msgspec's own depth guard
        raise _too_deep() from None


def _decode_lines(body: bytes) -> list[Interaction]:
    """NDJSON line by line: slower, but it says on which line the body breaks."""
    items = []
    for number, line in enumerate(body.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            items.append(_ONE.decode(line))
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise _invalid(exc, line, f"line {number}: ") from exc
        except RecursionError:
            raise _too_deep(f"line {number}: ") from None
    return items


def _decode_ndjson(body: bytes) -> list[Interaction]:
    """All lines in one decode; a body it refuses, or where a value spans lines (one decode
    accepts that, a line alone does not), is decoded line by line for the verdict."""
    try:
        items = _ONE.decode_lines(body)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return _decode_lines(body)
    if len(items) != sum(1 for line in body.split(b"\n") if line.strip()):
        return _decode_lines(body)
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


def _over_limit(items: list[Interaction], i: int, what: str) -> InvalidRequest:
    at = f"$[{i}]" if len(items) > 1 else "$"
    return InvalidRequest("invalid_body", f"{at}{what}")


def _check_limits(items: list[Interaction], limits: ServerConfig) -> None:
    """Messages per interaction, characters per text, metadata depth; messages built only on failure."""
    max_messages, max_chars = limits.max_messages, limits.max_text_chars
    for i, item in enumerate(items):
        if item.metadata and _depth(item.metadata) > MAX_DEPTH:
            raise _over_limit(items, i, f".metadata: nested deeper than {MAX_DEPTH} levels")
        messages = item.messages
        if len(messages) > max_messages:
            raise _over_limit(
                items, i, f".messages: {len(messages)} messages, at most {max_messages} allowed"
            )
        for j, message in enumerate(messages):
            if len(message.text) > max_chars:
                raise _over_limit(
                    items,
                    i,
                    f".messages[{j}].text: {len(message.text)} characters,"
                    f" at most {max_chars} allowed",
                )
            name = message.name
            if name is not None and len(name) > limits.max_name_chars:
                raise _over_limit(
                    items,
                    i,
                    f".messages[{j}].name: {len(name)} characters,"
                    f" at most {limits.max_name_chars} allowed",
                )


def parse_body(body: bytes, content_type: str, limits: ServerConfig) -> list[Interaction]:
    """Decode and validate a push body (one object, an array, or NDJSON) or raise InvalidRequest."""
    media = content_type.split(";")[0].strip().lower()
    if media in NDJSON_TYPES:
        items = _decode_ndjson(body)
    elif media in JSON_TYPES:
        if not body.strip():
            raise InvalidRequest("invalid_body", "the body is empty; send an interaction")
        items = _decode_json(body)
    else:
        raise InvalidRequest(
            "unsupported_media_type",
            f"Content-Type {media!r} is not "
            "supported; send application/json or application/x-ndjson",
        )
    if not items:
        raise InvalidRequest("invalid_body", "the body holds no interactions")
    _check_limits(items, limits)
    return items


async def read_body(body: bytes, content_type: str, limits: ServerConfig) -> list[Interaction]:
    """`parse_body`, in a worker thread for a large body: the event loop keeps serving meanwhile."""
    if len(body) <= OFFLOAD_BYTES:
        return parse_body(body, content_type, limits)
    return await trio.to_thread.run_sync(parse_body, body, content_type, limits)


def _strings(value: Any, out: list[str]) -> list[str]:
    """Every string of a metadata value, keys included, in the order `_rebuild` takes them back."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)
    elif isinstance(value, dict):
        for k, v in value.items():
            out.append(str(k))
            _strings(v, out)
    return out


def _rebuild(value: Any, scrubbed: Iterator[str], secret: str | None) -> Any:
    """The metadata value with its strings scrubbed; under a key naming a credential (`secret` is
    its kind) every string and number is redacted whole, at any depth."""
    if isinstance(value, str):
        text = next(scrubbed)
        return redacted(secret) if secret and value else text
    if isinstance(value, list):
        return [_rebuild(v, scrubbed, secret) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = next(scrubbed)
            out[key] = _rebuild(v, scrubbed, secret or secret_key_kind(str(k)))
        return out
    if secret and isinstance(value, int | float) and not isinstance(value, bool):
        return redacted(secret)
    return value


def _unchanged_identifiers(item: Interaction, scrubbed: list[str], at: str) -> None:
    """Ids, scopes and sessions are stored as given: one holding a secret is refused, not
    scrubbed, so that two of them never become one."""
    fields = (("id", item.id), ("scope", item.scope), ("session", item.session))
    for (field, value), clean in zip(
        ((f, v) for f, v in fields if v is not None), scrubbed, strict=True
    ):
        if clean != value:
            kinds = ", ".join(dict.fromkeys(_KIND.findall(clean)))
            raise InvalidRequest(
                "invalid_body",
                f"{at}.{field}: holds what looks like a secret ({kinds}); ids, scopes and "
                "sessions are stored as given, so send one without it",
            )


def _timestamp(value: str | None, received_at: str) -> str:
    """The interaction's time in forged's format; one more than a day past its receipt is
    refused: a turn dated in the future would win every recency test until that day came."""
    if value is None:
        return received_at
    try:
        stamp = utc_timestamp(value)
    except ValueError as exc:
        raise InvalidRequest("invalid_body", f"timestamp: {value!r} {exc}") from None
    if stamp > latest_timestamp(received_at):
        raise InvalidRequest(
            "invalid_body",
            f"timestamp: {value!r} is more than a day after the time of receipt ({received_at})",
        )
    return stamp


def _strings_of(item: Interaction) -> list[str]:
    """Every string of an interaction, in the order `_scrubbed` takes them back: identifiers,
    names, texts, metadata."""
    ids = [v for v in (item.id, item.scope, item.session) if v is not None]
    names = [m.name for m in item.messages if m.name]
    meta = _strings(item.metadata, []) if item.metadata else []
    return [*ids, *names, *(m.text for m in item.messages), *meta]


def _scrubbed(item: Interaction, clean: list[str], at: str) -> tuple[list[Message], Any]:
    """The messages and metadata rebuilt from an interaction's scrubbed strings."""
    ids = [v for v in (item.id, item.scope, item.session) if v is not None]
    _unchanged_identifiers(item, clean[: len(ids)], at)
    names = sum(1 for m in item.messages if m.name)
    clean_names = iter(clean[len(ids) : len(ids) + names])
    texts = clean[len(ids) + names : len(ids) + names + len(item.messages)]
    messages = [
        Message(role=m.role, text=text, name=next(clean_names) if m.name else None)
        for m, text in zip(item.messages, texts, strict=True)
    ]
    meta = iter(clean[len(ids) + names + len(messages) :])
    return messages, _rebuild(item.metadata, meta, None) if item.metadata else None


def _prepared(
    item: Interaction, strings: list[str], clean: list[str], received_at: str, at: str
) -> NewInteraction:
    """The log's row of an interaction; when scrubbing changed none of its strings (nearly
    always), its messages are encoded as decoded, nothing rebuilt."""
    if clean == strings and not item.metadata:
        messages, metadata = item.messages, None
    else:
        messages, metadata = _scrubbed(item, clean, at)
    return NewInteraction(
        client_id=item.id,
        scope=item.scope,
        session=item.session,
        timestamp=_timestamp(item.timestamp, received_at),
        received_at=received_at,
        tokens=sum(
            estimate_tokens(m.text) + (estimate_tokens(m.name) if m.name else 0) for m in messages
        ),
        messages=_JSON.encode(messages),
        metadata=None if metadata is None else _JSON.encode(metadata),
    )


def prepare_all(items: list[Interaction], received_at: str) -> list[NewInteraction]:
    """Scrub every string of the interactions (one prefilter scan for them all) and encode each
    for the log; an identifier holding a secret refuses the request."""
    strings = [_strings_of(item) for item in items]
    scrubbed = iter(scrub_all([s for own in strings for s in own]))
    where = (f"$[{i}]" if len(items) > 1 else "$" for i in range(len(items)))
    return [
        _prepared(item, own, list(islice(scrubbed, len(own))), received_at, at)
        for item, own, at in zip(items, strings, where, strict=True)
    ]


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

    def __init__(
        self,
        store: Backend,
        on_appended: Callable[[], None],
        backlog: Callable[[], int],
        max_backlog: int,
    ) -> None:
        self.store = store
        self._on_appended = on_appended
        self._backlog = backlog  # how far the slowest observer lags behind the log
        self._max_backlog = max_backlog
        self._send, self._receive = trio.open_memory_channel[_Pending](QUEUE_CAPACITY)
        self.queued = 0  # interactions of requests admitted and not yet answered
        self.commits = 0  # group commits so far, failed ones included
        self._answered_at = -math.inf  # when a push was last answered

    def idle_for(self) -> float:
        """Seconds since ingest last had a push in flight (none while one is): derived work
        (the turn index) waits for a burst to ease by it."""
        return 0.0 if self.queued else trio.current_time() - self._answered_at

    def _admit(self, count: int) -> None:
        """Refuse a request whose interactions would take the backlog past `max_backlog`."""
        limit = self._max_backlog
        if count > limit:
            raise InvalidRequest(
                "body_too_large",
                f"{count} interactions in one request, "
                f"more than max_backlog ({limit}); split the request",
            )
        backlog = self._backlog() + self.queued
        if backlog + count > limit:
            raise InvalidRequest(
                "backlog_full",
                f"{backlog} interactions wait for "
                f"distillation and this request adds {count}, the limit is "
                f"{limit}; retry later",
                retry_after=BACKLOG_RETRY_AFTER,
            )

    async def push(self, items: list[Interaction]) -> Accepted:
        """Admit the interactions or refuse them whole; store them durably; return after COMMIT."""
        self._admit(len(items))
        self.queued += len(items)  # no checkpoint since the check: concurrent pushes see these
        try:
            received_at = now()
            if sum(len(m.text) for i in items for m in i.messages) > OFFLOAD_CHARS:
                rows = await trio.to_thread.run_sync(prepare_all, items, received_at)
            else:
                rows = prepare_all(items, received_at)
            pending = _Pending(rows)
            try:  # the queue has room nearly always: no checkpoint, so no extra turn of the loop
                self._send.send_nowait(pending)
            except trio.WouldBlock:
                await self._send.send(pending)
            await pending.done.wait()
        finally:
            self.queued -= len(items)
            self._answered_at = trio.current_time()
        if pending.error is not None:
            raise pending.error
        return Accepted(pending.accepted, len(rows) - pending.accepted, pending.last_seq)

    async def _gather(self, expected: int, linger: float) -> list[_Pending]:
        """The next group: wait for a request, then up to `linger` seconds for `expected` in all.

        Clients answered by the last commit are on their way back; committing the one request
        already queued alone would split the next group in two (groups of 1 and 15 alternating
        with 16 clients). Whatever else is queued joins too.
        """
        group = [await self._receive.receive()]
        self._take_queued(group, expected)
        if len(group) < expected:
            with trio.move_on_after(linger):
                while len(group) < expected:
                    group.append(await self._receive.receive())
                    self._take_queued(group, expected)
        self._take_queued(group, GROUP_MAX_REQUESTS)
        return group

    def _take_queued(self, group: list[_Pending], size: int) -> None:
        """Add what is queued already to the group, up to `size` requests, without waiting."""
        while len(group) < size:
            try:
                group.append(self._receive.receive_nowait())
            except trio.WouldBlock:
                return

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The group committer: take what is queued, commit it in one transaction, wake waiters."""
        expected, linger = 1, 0.0
        task_status.started()
        while True:
            group = await self._gather(expected, linger)
            started = time.perf_counter()
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
            self.commits += 1
            expected = len(group)
            linger = min(LINGER_MAX, LINGER_SHARE * (time.perf_counter() - started))
