"""The memory browser's bounds with real idle sockets: connections over the cap are turned
away without a thread, and a request that never arrives whole is cut off."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from forged.ui.limits import BUSY, MAX_CONNECTIONS
from forged.ui.server import UiServer

HARD_TIMEOUT = 30.0  # seconds any socket of these tests waits before the test fails
LEAVING = 4  # threads that may be leaving at once, their slot already given back
HALF_SENT = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # a request whose head never ends


@contextmanager
def running(
    max_connections: int = MAX_CONNECTIONS, request_timeout: float = 60.0
) -> Iterator[UiServer]:
    """A page server in this process, on a thread of its own; shut down at the end."""
    server = UiServer("/nonexistent/forged.sock", max_connections=max_connections,
                      request_timeout=request_timeout)  # fmt: skip
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def _connect(port: int, stack: ExitStack, first: bytes = HALF_SENT) -> socket.socket:
    sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), HARD_TIMEOUT))
    sock.sendall(first)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_connection_over_the_cap_is_answered_503_without_a_thread() -> None:
    """With the cap's worth of half-sent requests held open, the next connection is told 503
    at once, and no thread beyond the cap's was started for any of them."""
    threads_before = threading.active_count()
    with running(max_connections=4) as server, ExitStack() as stack:
        port = server.server_address[1]
        for _ in range(4):
            _connect(port, stack)
        turned_away = [_read_all(_connect(port, stack, b"")) for _ in range(50)]
        threads = threading.active_count() - threads_before
    assert turned_away == [BUSY] * 50
    assert threads <= 1 + 4  # the server's own loop and one a held connection


def test_a_slot_is_free_again_once_its_connection_ends() -> None:
    """Closing a held connection lets the next one be served (here, refused for its Host)."""
    with running(max_connections=1) as server, ExitStack() as stack:
        port = server.server_address[1]
        held = _connect(port, stack)
        assert _read_all(_connect(port, stack, b"")) == BUSY
        held.shutdown(socket.SHUT_WR)  # the head ends: the server answers it and closes
        assert _read_all(held).startswith(b"HTTP/1.1 421 ")
        served = _read_all(_connect(port, stack, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
    assert served.startswith(b"HTTP/1.1 421 ")


def test_an_idle_connection_is_closed_after_the_request_timeout() -> None:
    """A connection that sends half a request and waits is closed by the server, unanswered."""
    with running(request_timeout=0.2) as server, ExitStack() as stack:
        idle = _connect(server.server_address[1], stack)
        assert _read_all(idle) == b""


def test_a_trickled_request_is_cut_off_however_steadily_it_comes() -> None:
    """One byte of header at a time, each well within any single read's patience, still meets
    the request's deadline: the server closes the connection before the head ends."""
    with running(request_timeout=0.3) as server, ExitStack() as stack:
        sock = _connect(server.server_address[1], stack, b"GET / HTTP/1.1\r\nX-Slow: ")
        closed = threading.Event()
        sent = 0
        while not closed.wait(0.01):  # the pace of a slowloris, not a wait for the result
            try:
                sock.sendall(b"a")
            except (BrokenPipeError, ConnectionResetError):
                closed.set()
            sent += 1
            assert sent < HARD_TIMEOUT / 0.01, "the trickled request was never cut off"
            sock.setblocking(False)
            try:
                if sock.recv(1) == b"":
                    closed.set()
            except BlockingIOError:
                pass
            except ConnectionResetError:
                closed.set()
            finally:
                sock.setblocking(True)
    assert closed.is_set()


@pytest.mark.integration
def test_the_browser_process_holds_a_thread_only_per_capped_connection(tmp_path: Path) -> None:
    """`forged ui` as a user starts it, sent 1,500 connections that never finish a request: it
    answers 503 past its cap, and its threads stay at the cap's, not one a connection."""
    child = subprocess.Popen(
        [sys.executable, "-m", "forged", "ui", "--socket", str(tmp_path / "none.sock")],
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline().split(b":")[3].split(b"/")[0])
        with ExitStack() as stack:
            socks = [_connect(port, stack, b"" if n >= 100 else HALF_SENT) for n in range(1500)]
            last = _read_all(socks[-1])  # accepted in order: every earlier one was handled
            status = Path(f"/proc/{child.pid}/status").read_text()
        threads = int(next(x for x in status.splitlines() if x.startswith("Threads:")).split()[1])
    finally:
        child.terminate()
        child.wait(10)
        if child.stdout is not None:
            child.stdout.close()
    assert last == BUSY
    # the cap's threads and the main one; and any whose connection ended meanwhile (a request
    # timed out on a loaded machine): such a thread gives back its slot before it exits
    assert threads <= MAX_CONNECTIONS + 1 + LEAVING
