"""The memory browser's bounds on connections: how many are served at once, and how long one
may take to send a request.

The page's server gives each connection a thread. Without bounds, any local user could open
connections that never finish a request and hold a thread each, forever (1,500 half-sent
connections made 1,501 threads). Here a connection past `MAX_CONNECTIONS` is answered 503 and
closed at once, by the accepting thread, without a thread of its own; and a connection has
`REQUEST_TIMEOUT` seconds for each request, from its first byte (or from the end of the last
answer, when idle between two) to the end of its body, however it trickles them in.
"""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["BUSY", "MAX_CONNECTIONS", "REQUEST_TIMEOUT", "CappedServer", "TimedRequests"]

MAX_CONNECTIONS = 32  # connections served at once: a browser opens about six
REQUEST_TIMEOUT = 10.0  # seconds to send one request, or to sit idle between two
_BUSY_TEXT = b"too many connections to forged ui: close some tabs and retry\n"
BUSY = (  # the whole answer to a connection over the cap, written without blocking
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\n\r\n%s"
    % (len(_BUSY_TEXT), _BUSY_TEXT)
)


class _Deadlined(io.RawIOBase):
    """A connection's reads, each allowed only what is left of the request's time."""

    def __init__(self, sock: socket.socket, budget: float) -> None:
        self._sock = sock
        self._budget = budget
        self.deadline = time.monotonic() + budget

    def restart(self) -> None:
        """A new request begins: its time starts now."""
        self.deadline = time.monotonic() + self._budget

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request took too long to arrive")
        self._sock.settimeout(left)
        try:
            return self._sock.recv_into(buffer)
        finally:  # a write has the whole budget, whatever the request's reads left
            self._sock.settimeout(self._budget)


class TimedRequests(BaseHTTPRequestHandler):
    """A handler whose every request must arrive whole within the server's request timeout;
    the base class closes the connection on `TimeoutError`."""

    server: CappedServer
    _raw: _Deadlined

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout)  # bounds each write too
        self._raw = _Deadlined(self.connection, self.server.request_timeout)
        self.rfile = io.BufferedReader(self._raw)

    def handle_one_request(self) -> None:
        self._raw.restart()
        super().handle_one_request()


class CappedServer(ThreadingHTTPServer):
    """An HTTP server, a thread a connection, that serves at most `max_connections` connections at once."""

    request_queue_size = 128  # a burst waits to be accepted (or turned away), not retried

    def __init__(self, *args: Any, max_connections: int, request_timeout: float) -> None:
        super().__init__(*args)
        self.request_timeout = request_timeout
        self._slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._turn_away(request)
            return
        try:
            super().process_request(request, client_address)  # starts the thread
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self._slots.release()  # before the close, which is all the client can see
            self.shutdown_request(request)

    def _turn_away(self, request: socket.socket) -> None:
        """Answer 503 without waiting on the client, and close."""
        request.setblocking(False)
        with contextlib.suppress(OSError):  # its buffer is full or it is gone: closing says it
            request.send(BUSY)
            request.recv(65536)  # what it sent already: closing on unread bytes would reset
        self.shutdown_request(request)
