"""The HTTP server on a real Unix socket, with its own handlers: HEAD, error boundary, limits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from forged.config import ServerConfig
from forged.http.connection import Request, Response
from forged.http.server import HttpServer

BODY = b'{"status": "ok"}'  # what the test handler answers by default
TIMEOUT = 10  # seconds any test here may take


class _Handler:
    """Answers BODY; `/boom` raises; `/big` answers `big` bytes; `/hold` waits for `release`;
    `/echo` answers the request's body."""

    def __init__(self) -> None:
        self.big = 0
        self.release = trio.Event()
        self.holding = trio.Event()

    async def __call__(self, request: Request) -> Response:
        if request.path == "/boom":
            raise RuntimeError("a bug in a handler")
        if request.path == "/big":
            return Response(200, b"x" * self.big)
        if request.path == "/echo":
            return Response(200, request.body)
        if request.path == "/hold":
            self.holding.set()
            await self.release.wait()
        return Response(200, BODY)


@asynccontextmanager
async def _serving(directory: Path, **limits: Any) -> AsyncIterator[tuple[str, _Handler]]:
    """An HttpServer on `directory/s.sock` with the given limits; cancelled at the end."""
    path = str(directory / "s.sock")
    sock = trio.socket.socket(trio.socket.AF_UNIX)
    await sock.bind(path)
    sock.listen(1024)
    handler = _Handler()
    server = HttpServer(handler, ServerConfig(socket=path, **limits))
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, trio.SocketListener(sock))
        yield path, handler
        nursery.cancel_scope.cancel()


async def _read_all(stream: trio.SocketStream) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


async def _exchange(path: str, request: bytes) -> bytes:
    stream = await trio.open_unix_socket(path)
    async with stream:
        await stream.send_all(request)
        return await _read_all(stream)


async def test_head_is_answered_with_the_head_of_get_alone(sock_dir: Path) -> None:
    """HEAD gets GET's status and Content-Length and no body; the connection stays usable."""
    with trio.fail_after(TIMEOUT):
        async with _serving(sock_dir) as (path, _):
            answer = await _exchange(
                path,
                b"HEAD /v1/health HTTP/1.1\r\nhost: f\r\n\r\n"
                b"GET /v1/health HTTP/1.1\r\nhost: f\r\nconnection: close\r\n\r\n",
            )
    head, get = answer.split(b"HTTP/1.1 ")[1:]
    assert head.startswith(b"200 ")
    assert f"content-length: {len(BODY)}\r\n".encode() in head
    assert head.endswith(b"\r\n\r\n")  # nothing after the head
    assert get.endswith(b"\r\n\r\n" + BODY)


async def _answer(stream: trio.SocketStream, data: bytes = b"") -> tuple[bytes, bytes]:
    """One response's body from the stream (`data`: bytes already read), and the bytes past it."""
    while b"\r\n\r\n" not in data:
        data += await stream.receive_some(65536)
    head, data = data.split(b"\r\n\r\n", 1)
    length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(data) < length:
        data += await stream.receive_some(65536)
    return data[:length], data[length:]


async def test_keep_alive_serves_each_request_with_its_own_body(sock_dir: Path) -> None:
    """On one connection: a request sent after the last answer, a body arriving in two writes,
    a request pipelined right behind a body: each answered in turn with its own body."""
    post = b"POST /echo HTTP/1.1\r\nhost: f\r\ncontent-length: %d\r\n\r\n%s"
    with trio.fail_after(TIMEOUT):
        async with _serving(sock_dir) as (path, _):
            stream = await trio.open_unix_socket(path)
            async with stream:
                await stream.send_all(post % (3, b"one"))
                first, rest = await _answer(stream)
                await stream.send_all(post % (5, b"tw"))
                await trio.testing.wait_all_tasks_blocked()  # the server waits for the body
                await stream.send_all(b"o!!" + post % (5, b"three"))
                second, rest = await _answer(stream, rest)
                third, rest = await _answer(stream, rest)
    assert (first, second, third, rest) == (b"one", b"two!!", b"three", b"")


async def test_a_body_cut_short_by_the_client_gets_400(sock_dir: Path) -> None:
    """A client that stops sending before the declared length is told so, then closed."""
    with trio.fail_after(TIMEOUT):
        async with _serving(sock_dir) as (path, _):
            stream = await trio.open_unix_socket(path)
            async with stream:
                await stream.send_all(
                    b"POST /echo HTTP/1.1\r\nhost: f\r\ncontent-length: 9\r\n\r\nabc"
                )
                await stream.send_eof()
                answer = await _read_all(stream)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert answer.endswith(
        b"peer closed connection without sending complete message body "
        b'(received 3 bytes, expected 9)"}}'
    )


async def test_an_error_in_one_connection_ends_only_that_connection(sock_dir: Path) -> None:
    """A handler that raises closes its connection; the server keeps serving the next ones."""
    with trio.fail_after(TIMEOUT):
        async with _serving(sock_dir) as (path, _):
            broken = await _exchange(path, b"GET /boom HTTP/1.1\r\nhost: f\r\n\r\n")
            after = await _exchange(path, b"GET / HTTP/1.1\r\nhost: f\r\nconnection: close\r\n\r\n")
    assert broken == b""
    assert after.startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("first_bytes", [b"G", b"HEAD / HTTP/1.1\r\nhost: f\r\n\r\n"])
async def test_refused_connections_are_answered_and_closed_at_once(
    sock_dir: Path, first_bytes: bytes
) -> None:
    """Past the cap, each connection gets 503 and is closed, long before `header_timeout`."""
    with trio.fail_after(TIMEOUT):
        async with _serving(sock_dir, max_connections=2, header_timeout=60.0) as (path, _):
            held = [await trio.open_unix_socket(path) for _ in range(2)]
            for stream in held:  # mid-request, as `100 Continue` shows: not idle, never evicted
                await stream.send_all(
                    b"POST / HTTP/1.1\r\nhost: f\r\ncontent-length: 9\r\n"
                    b"expect: 100-continue\r\n\r\n"
                )
                assert (await stream.receive_some(65536)).startswith(b"HTTP/1.1 100 ")
            answers = []
            for _ in range(50):
                answers.append(await _exchange(path, first_bytes))
            for stream in held:
                await stream.aclose()
    assert {a.split(b"\r\n", 1)[0] for a in answers} == {b"HTTP/1.1 503 "}
    assert all(
        a.endswith(
            b'"code":"too_many_connections",'
            b'"message":"the server is at its connection limit; retry shortly"}}'
        )
        for a in answers
    )


async def test_bodies_received_at_once_are_bounded(sock_dir: Path) -> None:
    """A body that would pass `max_receiving_bytes` gets 503 server_busy; later it fits again."""
    limits = {"max_body_bytes": 60_000, "max_receiving_bytes": 100_000}
    post = b"POST /hold HTTP/1.1\r\nhost: f\r\ncontent-length: 60000\r\n\r\n" + b"x" * 60_000
    with trio.fail_after(TIMEOUT):
        async with _serving(sock_dir, **limits) as (path, handler):
            first = await trio.open_unix_socket(path)
            await first.send_all(post)
            await handler.holding.wait()  # the first body is held by its handler
            busy = await _exchange(path, post.replace(b"/hold", b"/"))
            handler.release.set()
            held = await first.receive_some(65536)
            await first.aclose()
            fits = await _exchange(
                path,
                post.replace(b"/hold", b"/").replace(
                    b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n", 1
                ),
            )
    assert busy.startswith(b"HTTP/1.1 503 ")
    assert b"\r\nretry-after: 1\r\n" in busy
    assert busy.endswith(
        b'{"error":{"code":"server_busy","message":"the server is receiving '
        b'too many large bodies at once; retry shortly"}}'
    )
    assert held.startswith(b"HTTP/1.1 200 ")
    assert fits.startswith(b"HTTP/1.1 200 ")


async def test_a_response_the_client_does_not_read_closes_the_connection(
    sock_dir: Path,
) -> None:
    """A pipelined response cut at `body_timeout` is the last: no other response follows it."""
    size = 16 * 1024 * 1024  # far more than the socket buffers hold
    request = b"GET /big HTTP/1.1\r\nhost: f\r\n\r\n"
    with trio.fail_after(TIMEOUT):
        async with _serving(sock_dir, body_timeout=0.2) as (path, handler):
            handler.big = size
            stream = await trio.open_unix_socket(path)
            async with stream:
                await stream.send_all(request * 3)
                await trio.sleep(1.0)  # the misbehaviour itself: not reading past body_timeout
                answer = await _read_all(stream)
    assert answer.count(b"HTTP/1.1 200 ") == 1
    assert len(answer) < size


async def test_an_idle_keep_alive_connection_is_closed_quietly_at_idle_timeout(
    sock_dir: Path,
) -> None:
    """After its answer, a connection that starts no other request is closed with nothing sent."""
    with trio.fail_after(TIMEOUT):
        async with _serving(sock_dir, idle_timeout=0.2) as (path, _):
            answer = await _exchange(path, b"GET / HTTP/1.1\r\nhost: f\r\n\r\n")
    assert answer.count(b"HTTP/1.1 ") == 1
    assert answer.endswith(BODY)


@pytest.mark.parametrize(
    "partial",
    [b"GET / HTTP/1.1\r\nhost:", b"POST / HTTP/1.1\r\nhost: f\r\ncontent-length: 10\r\n\r\n{"],
    ids=["head", "body"],
)
async def test_a_request_slow_to_arrive_gets_408(sock_dir: Path, partial: bytes) -> None:
    """A head past `header_timeout` or a body past `body_timeout` is answered 408, then closed,
    even though the connection could have stayed idle far longer."""
    limits = {"idle_timeout": 60.0, "header_timeout": 0.2, "body_timeout": 0.2}
    with trio.fail_after(TIMEOUT):
        async with _serving(sock_dir, **limits) as (path, _):
            answer = await _exchange(path, partial)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert answer.endswith(
        b'{"error":{"code":"request_timeout","message":"the request took too long to arrive"}}'
    )


async def test_a_handler_is_not_cut_by_the_request_deadlines(sock_dir: Path) -> None:
    """The deadlines bound arriving and leaving, not the handler: a slow answer still goes out."""
    limits = {"idle_timeout": 0.1, "header_timeout": 0.1, "body_timeout": 0.1}
    with trio.fail_after(TIMEOUT):
        async with _serving(sock_dir, **limits) as (path, handler), trio.open_nursery() as n:
            n.start_soon(_release_later, handler)
            answer = await _exchange(path, b"GET /hold HTTP/1.1\r\nhost: f\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.endswith(BODY)


async def _release_later(handler: _Handler) -> None:
    await handler.holding.wait()
    await trio.sleep(0.5)  # several times every deadline
    handler.release.set()
