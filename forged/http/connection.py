"""One HTTP/1.1 connection (h11 on a trio stream): each request read whole within its phase's
deadline and the size limits, its body counted against the budget shared by all connections,
each response sent in one write; keep-alive until the client leaves or misbehaves.

h11 parses request heads and chunked bodies; a body of declared length is read here, and the
responses, always framed by Content-Length, are written here: a fresh h11 parser per request
(seeded with the bytes received past the last one) spares its per-event bookkeeping."""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable
from typing import Literal
from urllib.parse import parse_qsl, unquote, urlsplit

import h11
import msgspec
import trio

from forged.config import ServerConfig
from forged.errors import ForgedError, InvalidRequest
from forged.models import ErrorAnswer, ErrorBody

__all__ = [
    "BUSY_RETRY_AFTER",
    "RECEIVE_SIZE",
    "REFUSAL_STATUS",
    "BodyBudget",
    "Connection",
    "Fields",
    "Handler",
    "HttpError",
    "InFlight",
    "Phase",
    "Request",
    "Response",
    "error_response",
    "refusal_response",
]

RECEIVE_SIZE = 65536  # bytes read from a socket at once
BUSY_RETRY_AFTER = 1  # seconds a client is told to wait while the body budget is spent
# What a connection's deadline bounds: waiting for a request to start, its head or body arriving,
# the handler (unbounded), the response leaving.
Phase = Literal["idle", "head", "body", "handle", "respond"]


class Request(msgspec.Struct, frozen=True):
    """A whole request: the body has been read."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: bytes


class Response(msgspec.Struct, frozen=True):
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[Request], Awaitable[Response]]
# A target that urlsplit and unquote would keep as it is: no query, escape, fragment or authority.
_PLAIN_PATH = re.compile(r"/(?!/)[A-Za-z0-9/._~-]*")
_ERROR = msgspec.json.Encoder()


def error_response(
    status: int, code: str, message: str, retry_after: int | None = None
) -> Response:
    """The API's error shape: `{"error": {"code", "message"}}`."""
    headers = (("retry-after", str(retry_after)),) if retry_after is not None else ()
    body = _ERROR.encode(ErrorAnswer(ErrorBody(code, message)))
    return Response(status, body, headers=headers)


class HttpError(InvalidRequest):
    """A request a route refuses with a status of its own choosing (400, 404, 409, 429, 503)."""

    def __init__(self, status: int, code: str, message: str, *, retry_after: int | None = None):
        super().__init__(code, message, retry_after=retry_after)
        self.status = status


# The status a refusal from below the HTTP layer is answered with, by its code.
REFUSAL_STATUS = {
    "invalid_body": 400,
    "body_too_large": 413,
    "unsupported_media_type": 415,
    "backlog_full": 503,
    "query_timeout": 503,
    "not_found": 404,
    "duplicate_fact": 409,
    "fact_superseded": 409,
}


def refusal_response(exc: InvalidRequest) -> Response:
    """The error answer to a refused request: a route's own status, or the one its code means."""
    status = exc.status if isinstance(exc, HttpError) else REFUSAL_STATUS[exc.code]
    return error_response(status, exc.code, exc.message, exc.retry_after)


class _TooLarge(ForgedError):
    """The request body is over the limit."""


class _Busy(ForgedError):
    """Bodies being received by other connections already fill the budget."""


class InFlight:
    """Counts requests being answered (handler and response), so shutdown can wait for them."""

    def __init__(self) -> None:
        self.count = 0
        self._quiet = trio.Event()
        self._quiet.set()

    def __enter__(self) -> None:
        if self.count == 0:
            self._quiet = trio.Event()
        self.count += 1

    def __exit__(self, *exc_info: object) -> None:
        self.count -= 1
        if self.count == 0:
            self._quiet.set()

    async def wait(self) -> None:
        await self._quiet.wait()


class BodyBudget:
    """Bytes of request bodies held at once across connections, from arrival to the answer."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> None:
        if self.used + size > self.limit:
            raise _Busy
        self.used += size

    def give(self, size: int) -> None:
        self.used -= size


Fields = list[tuple[bytes, bytes]]  # a request's header fields, names in lower case


def _head_size(head: h11.Request, fields: Fields) -> int:
    """The size of a request head as sent: request line, header lines, blank line."""
    line = len(head.method) + len(head.target) + len(b"  HTTP/1.1\r\n")
    return line + sum(len(name) + len(value) + 4 for name, value in fields) + 2


def _keep_alive(head: h11.Request, fields: Fields) -> bool:
    """Whether the client lets the connection serve another request after this one (as h11)."""
    if head.http_version < b"1.1":
        return False
    tokens = (t.strip().lower() for n, v in fields if n == b"connection" for t in v.split(b","))
    return b"close" not in tokens


def _encoded(response: Response, close: bool, head_only: bool) -> bytes:
    """The response as sent: status line (no reason phrase, as h11 writes it), headers, body."""
    lines = [
        b"HTTP/1.1 %d \r\ncontent-type: %s\r\ncontent-length: %d\r\n"
        % (response.status, response.content_type.encode("ascii"), len(response.body))
    ]
    lines += [b"%s: %s\r\n" % (n.encode("ascii"), v.encode("ascii")) for n, v in response.headers]
    if close:
        lines.append(b"connection: close\r\n")
    lines.append(b"\r\n")
    if not head_only:
        lines.append(response.body)
    return b"".join(lines)


def _declared_length(fields: Fields) -> int | None:
    length = dict(fields).get(b"content-length")
    return int(length) if length is not None and length.isdigit() else None


class Connection:
    """One client connection: an h11 state machine over a trio stream."""

    def __init__(
        self,
        stream: trio.SocketStream,
        limits: ServerConfig,
        in_flight: InFlight,
        budget: BodyBudget,
    ) -> None:
        self.stream = stream
        self.limits = limits
        self.in_flight = in_flight
        self.budget = budget
        self.reserved = 0  # bytes of the budget held by the current request's body
        self.conn = self._parser()
        self.phase: Phase = "idle"
        self.head_only = False  # the current request is HEAD: answer with headers alone
        self.fields: Fields = []  # the current request's header fields (h11's are slow to iterate)
        self.keep_alive = True  # the current request lets another follow on this connection
        self.responded = False  # the current request has had its response
        self.rest = b"", False  # bytes received past the current request; whether the client closed
        # The connection's one deadline, moved at each phase of a request rather than a scope
        # per phase (each costs a scope's entry and exit); eviction cancels it too.
        self.scope = trio.CancelScope()

    def _parser(self) -> h11.Connection:
        return h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes)

    def _next_cycle(self) -> None:
        """A fresh parser for the next request, holding the bytes already received past this one."""
        data, closed = self.rest
        self.conn = self._parser()
        if data:
            self.conn.receive_data(data)
        if closed:
            self.conn.receive_data(b"")  # h11's word for "the client closed its side"
        self.responded = False

    @property
    def idle(self) -> bool:
        """Waiting for a request to start: the connection may be evicted."""
        return self.phase == "idle"

    @property
    def timed_out_receiving(self) -> bool:
        """The deadline cut a request short while its head or body was arriving."""
        return self.scope.cancelled_caught and self.phase in ("head", "body")

    def _enter(self, phase: Phase, seconds: float) -> None:
        """Start a phase that may last `seconds` from now."""
        self.phase = phase
        self.scope.deadline = trio.current_time() + seconds

    async def _next_event(
        self, phase: Phase, seconds: float
    ) -> h11.Event | type[h11.PAUSED] | type[h11.NEED_DATA]:
        """The next event; if more bytes must arrive first, `phase` starts (once) to bound them:
        a request that arrived whole in one read moves no deadline."""
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            if self.phase != phase:
                self._enter(phase, seconds)
            data = await self.stream.receive_some(RECEIVE_SIZE)
            self.conn.receive_data(data)

    async def _read_head(self) -> h11.Request | None:
        """Wait up to `idle_timeout` for a request to start, then `header_timeout` for its head."""
        self._enter("idle", self.limits.idle_timeout)
        event = self.conn.next_event() if any(self.rest) else h11.NEED_DATA  # else nothing to parse
        if event is h11.NEED_DATA:
            self.conn.receive_data(await self.stream.receive_some(RECEIVE_SIZE))
            event = await self._next_event("head", self.limits.header_timeout)
        if not isinstance(event, h11.Request):
            return None
        self.fields = list(event.headers)
        if _head_size(event, self.fields) > self.limits.max_header_bytes:
            # h11 caps only a head still incomplete; one that arrived whole in a read is checked here
            raise h11.RemoteProtocolError("the request head is too large", error_status_hint=431)
        self.head_only = event.method == b"HEAD"
        self.keep_alive = _keep_alive(event, self.fields)
        return event

    def _reserve(self, size: int) -> None:
        """Count `size` body bytes against the budget, before they are read."""
        if size > self.reserved:
            self.budget.take(size - self.reserved)
            self.reserved = size

    def _release(self) -> None:
        self.budget.give(self.reserved)
        self.reserved = 0

    async def _read_body(self) -> bytes:
        length = _declared_length(self.fields)
        if length is not None and length > self.limits.max_body_bytes:
            raise _TooLarge
        self._reserve(length or 0)
        if self.conn.they_are_waiting_for_100_continue:
            self._enter("body", self.limits.body_timeout)
            await self._send(h11.InformationalResponse(status_code=100, headers=[]))
        if any(name == b"transfer-encoding" for name, _ in self.fields):  # chunked (h11 checked)
            return await self._read_chunked()
        return await self._read_sized(length or 0)

    async def _read_sized(self, length: int) -> bytes:
        """A body of the declared length, taken from what h11 buffered past the head and read on."""
        data, closed = self.conn.trailing_data
        if len(data) < length:
            buffer = bytearray(data)
            while len(buffer) < length:
                if closed:  # the message h11 gives for it
                    raise h11.RemoteProtocolError(
                        "peer closed connection without sending complete "
                        f"message body (received {len(buffer)} bytes, "
                        f"expected {length})"
                    )
                if self.phase != "body":
                    self._enter("body", self.limits.body_timeout)
                received = await self.stream.receive_some(RECEIVE_SIZE)
                buffer += received
                closed = not received
            data = bytes(buffer)
        self.rest = data[length:], closed
        return data[:length]

    async def _read_chunked(self) -> bytes:
        """A chunked body, as h11 parses it, counted against the limit as it arrives."""
        timeout = self.limits.body_timeout
        chunks, size = [], 0
        while not isinstance(event := await self._next_event("body", timeout), h11.EndOfMessage):
            if isinstance(event, h11.ConnectionClosed):
                raise h11.RemoteProtocolError("the client closed the connection mid-body")
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > self.limits.max_body_bytes:
                    raise _TooLarge
                self._reserve(size)  # a chunked body, whose size was not declared
                chunks.append(event.data)
        self.rest = self.conn.trailing_data  # what follows is the next request's
        return b"".join(chunks)

    async def _send(self, event: h11.Event) -> None:
        data = self.conn.send(event)
        if data:
            await self.stream.send_all(data)

    async def respond(self, response: Response, *, close: bool = False) -> None:
        """Send the response in one write, within `body_timeout` (else the deadline cuts it).

        To HEAD, only the head goes out, with the Content-Length a GET would get.
        """
        if self.responded:
            return
        self.responded = True
        self.keep_alive = self.keep_alive and not close
        data = _encoded(response, not self.keep_alive, self.head_only)
        self._enter("respond", self.limits.body_timeout)
        await self.stream.send_all(data)  # one write: one wake-up for the client

    async def time_out(self) -> None:
        """Answer 408 to a request whose head or body was too slow to arrive, under a new deadline."""
        self.scope = trio.CancelScope()
        with self.scope:
            message = "the request took too long to arrive"
            await self.respond(error_response(408, "request_timeout", message), close=True)

    async def _receive(self) -> tuple[h11.Request, bytes] | Response | None:
        """The next whole request; an error response to close with; None when the client left.

        A request too slow to arrive is cut by the deadline; `time_out` answers it.
        """
        try:
            head = await self._read_head()
            if head is None:
                return None
            return head, await self._read_body()
        except _TooLarge:
            message = f"the body is larger than {self.limits.max_body_bytes} bytes"
            return error_response(413, "body_too_large", message)
        except _Busy:
            message = "the server is receiving too many large bodies at once; retry shortly"
            return error_response(503, "server_busy", message, BUSY_RETRY_AFTER)
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint
            code = "headers_too_large" if status == 431 else "bad_request"
            return error_response(status, code, f"malformed HTTP request: {exc}")

    async def serve(self, handler: Handler) -> None:
        """Answer requests on this connection until it closes or misbehaves.

        Run inside `self.scope`: a phase past its deadline ends the connection; a response the
        client does not read in time is cut, and nothing may follow it.
        """
        while True:
            try:
                received = await self._receive()
                if received is None:
                    return
                if isinstance(received, Response):
                    await self.respond(received, close=True)
                    return
                with self.in_flight:
                    self._enter("handle", math.inf)
                    await self.respond(await handler(_request(*received, self.fields)))
            finally:
                self._release()
            if not self.keep_alive:
                return
            self._next_cycle()


def _request(head: h11.Request, body: bytes, fields: Fields) -> Request:
    target = head.target.decode("ascii", "replace")
    path, query = target, {}
    if not _PLAIN_PATH.fullmatch(target):
        parts = urlsplit(target)
        path, query = unquote(parts.path), dict(parse_qsl(parts.query, keep_blank_values=True))
    return Request(
        method=head.method.decode("ascii", "replace"),
        path=path,
        query=query,
        headers={k.decode("latin-1"): v.decode("latin-1") for k, v in fields},
        body=body,
    )
