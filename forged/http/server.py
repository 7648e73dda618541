"""HTTP/1.1 on a stream listener: accepts connections up to a cap, refuses peers whose uid is not
allowed, and serves each connection (forged.http.connection) in its own task, its reads counted
against the process at the other end (forged.store.readers)."""

from __future__ import annotations

import contextlib
import errno
import socket
import struct
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from functools import partial

import structlog
import trio

from forged.backoff import Backoff
from forged.config import ServerConfig
from forged.http.connection import (
    RECEIVE_SIZE,
    BodyBudget,
    Connection,
    Handler,
    InFlight,
    Response,
    error_response,
)
from forged.store.readers import Client, reading_for

__all__ = [
    "ACCEPT_BACKOFF_INITIAL",
    "ACCEPT_BACKOFF_MAX",
    "ACCEPT_CAPACITY_ERRNOS",
    "REFUSAL_LINGER",
    "HttpServer",
]

ACCEPT_CAPACITY_ERRNOS = frozenset(  # out of descriptors or kernel memory: wait, then accept again
    {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
)
ACCEPT_BACKOFF_INITIAL = 0.1  # seconds before the first retry of such an accept (as trio's)
ACCEPT_BACKOFF_MAX = 2.0  # seconds between retries at most, so the log is not flooded
REFUSAL_LINGER = 1.0  # seconds a refused client has to send its request before we close
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError)  # the client closed or reset

log = structlog.get_logger(__name__)


def _peer(stream: trio.SocketStream) -> Client | None:
    """The process at the other end, by the credentials the kernel gives (Unix sockets only)."""
    try:
        raw = stream.socket.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    except OSError:
        return None
    pid, uid, _gid = _PEERCRED.unpack(raw)
    return Client(pid, uid)


class HttpServer:
    """Accepts connections up to a cap, checks the peer's uid, and serves each in its own task."""

    def __init__(self, handler: Handler, limits: ServerConfig) -> None:
        self.handler = handler
        self.limits = limits
        self._connections: OrderedDict[Connection, None] = OrderedDict()
        self._in_flight = InFlight()
        self._budget = BodyBudget(limits.max_receiving_bytes)

    async def serve(
        self,
        listener: trio.SocketListener,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        async with listener, trio.open_nursery() as nursery:
            task_status.started()
            while True:
                stream = await self._accept(listener)
                nursery.start_soon(self._boundary, self._admit(stream), stream)

    async def wait_quiet(self) -> None:
        """Return once no request is being answered (idle keep-alive connections do not count)."""
        await self._in_flight.wait()

    async def _accept(self, listener: trio.SocketListener) -> trio.SocketStream:
        """The next connection; while descriptors or memory run out, keep serving and retry."""
        backoff = Backoff(ACCEPT_BACKOFF_INITIAL, ACCEPT_BACKOFF_MAX)
        while True:
            try:
                return await listener.accept()
            except OSError as exc:
                if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                pause = backoff.next()
                log.warning("accept_failed", error=errno.errorcode[exc.errno], retry_in_s=pause)
                self._evict_idle()  # an idle keep-alive connection's descriptor is better used
                await trio.sleep(pause)

    def _evict_idle(self) -> bool:
        """Make room by closing the longest-idle keep-alive connection, if there is one."""
        for connection in self._connections:
            if connection.idle:
                connection.scope.cancel()
                del self._connections[connection]
                return True
        return False

    async def _boundary(
        self, serve: Callable[[trio.SocketStream], Awaitable[None]], stream: trio.SocketStream
    ) -> None:
        """One connection's task: whatever fails in it closes it, never the server."""
        try:
            async with stream:
                await serve(stream)
        except _GONE:
            pass  # the client went away
        except Exception:
            log.exception("connection_failed")

    async def _refuse(self, refusal: Response, stream: trio.SocketStream) -> None:
        """Answer with the error at once and close soon: a refused client holds no descriptor.

        The answer goes out before the request is read. Closing only once the client's first bytes
        arrive (or `REFUSAL_LINGER` passed) lets a client that writes before it reads (curl) see
        the error rather than a failed write.
        """
        connection = Connection(stream, self.limits, self._in_flight, self._budget)
        with connection.scope:
            await connection.respond(refusal, close=True)
        with trio.move_on_after(REFUSAL_LINGER), contextlib.suppress(*_GONE):  # it may hang up
            await stream.receive_some(RECEIVE_SIZE)

    def _admit(self, stream: trio.SocketStream) -> Callable[[trio.SocketStream], Awaitable[None]]:
        """Refuse the connection or take it, decided at once: the cap counts it before it runs."""
        allowed, peer = self.limits.allowed_uids, _peer(stream)
        if allowed and (uid := None if peer is None else peer.uid) not in allowed:
            log.warning("client_refused", uid=uid, reason="uid not in allowed_uids")
            forbidden = error_response(403, "forbidden", f"uid {uid} may not use this socket")
            return partial(self._refuse, forbidden)
        if len(self._connections) >= self.limits.max_connections and not self._evict_idle():
            message = "the server is at its connection limit; retry shortly"
            return partial(self._refuse, error_response(503, "too_many_connections", message))
        connection = Connection(stream, self.limits, self._in_flight, self._budget)
        self._connections[connection] = None
        # a peer without credentials is a client of its own, never one with no share at all
        return partial(self._serve, connection, peer or connection)

    async def _serve(
        self, connection: Connection, client: Hashable, _stream: trio.SocketStream
    ) -> None:
        """Answer the connection's requests, their reads counted against its client."""
        try:
            with connection.scope, reading_for(client):
                await connection.serve(self.handler)
            if connection.timed_out_receiving:
                await connection.time_out()
        finally:
            self._connections.pop(connection, None)
