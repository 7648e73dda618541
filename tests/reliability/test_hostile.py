"""Hostile clients on the real socket: every bad request gets a 4xx or a close, never a 500."""

from __future__ import annotations

import json
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.daemons import READY_TIMEOUT, socket_client, write_config
from tests.support.data import interaction, rows
from tests.support.reliability import record, scaled

SEED = 7  # random garbage is the same on every run
IDLE_CONNECTIONS = scaled(1000)  # connections opened and left silent
RANDOM_PAYLOADS = scaled(60)  # random byte strings sent as requests
TRUNCATIONS = scaled(40)  # valid requests cut short at random points
EXAMPLES = scaled(300)  # hypothesis-generated bodies
TIMEOUT = 0.5  # header and body timeouts of the daemon under attack, seconds
DRIP = 0.1  # seconds between the bytes of a slow-drip request
FD_LIMIT = 1024  # systemd's default soft limit on open files
FLOOD = 1100  # connections that each send one byte: more than FD_LIMIT
LIMITS = {
    "max_connections": 32,
    "header_timeout": TIMEOUT,
    "body_timeout": TIMEOUT,
    "idle_timeout": 60.0,  # idle connections must be evicted by the cap, not by time
    "max_header_bytes": 8192,
    "max_body_bytes": 65536,
}
GOOD_PUSH = json.dumps(interaction("probe")).encode()
CONTENT_TYPES = [
    "application/json",
    "application/x-ndjson",
    "",
    "text/plain",
    "application/json; charset=utf-8",
]


class _Daemon:
    """`forged serve` in a process of its own; READY=1 read from a notify socket."""

    def __init__(
        self,
        directory: Path,
        limits: dict[str, Any] = LIMITS,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.directory = directory
        self.socket = str(directory / "forged.sock")
        self.db = str(directory / "forged.db")
        self.log = directory / "daemon.log"
        config = write_config(
            directory, "http://127.0.0.1:9/v1", server=limits, distill={"enabled": False}
        )
        notify_path = str(directory / "notify.sock")
        with (
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify,
            open(self.log, "wb") as log,
        ):
            notify.bind(notify_path)
            notify.settimeout(READY_TIMEOUT)
            env = {**os.environ, "NOTIFY_SOCKET": notify_path}
            argv = [sys.executable, "-m", "forged", "serve", "--config", str(config)]
            self.process = subprocess.Popen(argv, env=env, stderr=log, preexec_fn=preexec_fn)
            while b"READY=1" not in notify.recv(4096).split(b"\n"):
                pass

    def events(self, name: str) -> list[dict[str, Any]]:
        """The daemon's log entries (JSON lines) of event `name`."""
        lines = [line for line in self.log.read_text().splitlines() if line.startswith("{")]
        return [e for e in map(json.loads, lines) if e.get("event") == name]


@contextmanager
def _spawned(**options: Any) -> Iterator[_Daemon]:
    """A daemon in a fresh short directory (a socket path), killed at the end."""
    with tempfile.TemporaryDirectory(prefix="fg") as path:
        running = _Daemon(Path(path), **options)
        try:
            yield running
        finally:
            running.process.send_signal(signal.SIGKILL)
            running.process.wait()


@pytest.fixture(scope="module")
def daemon() -> Iterator[_Daemon]:
    with _spawned() as running:
        yield running


def _status(answer: bytes) -> int | None:
    """The status of the first response on a connection, or None when it was closed unanswered."""
    if not answer:
        return None
    return int(answer.split(b" ", 2)[1])


async def _attempt(
    daemon: _Daemon, payload: bytes, *, drip: float = 0.0, eof: bool = True
) -> int | None:
    """Send `payload` (byte by byte with `drip` seconds between), then read the first answer."""
    stream = await trio.open_unix_socket(daemon.socket)
    async with stream:
        try:
            if drip:
                for i in range(len(payload)):
                    await stream.send_all(payload[i : i + 1])
                    await trio.sleep(drip)  # the attack itself: a client that trickles
            else:
                await stream.send_all(payload)
            if eof:
                await stream.send_eof()
        except trio.BrokenResourceError:
            pass  # the daemon answered and closed while we were still sending
        answer = b""
        with trio.move_on_after(10):
            while chunk := await stream.receive_some(65536):
                answer += chunk
                if b"\r\n\r\n" in answer:
                    break
        return _status(answer)


def _request(body: bytes, headers: str = "content-type: application/json\r\n") -> bytes:
    return (
        f"POST /v1/interactions HTTP/1.1\r\nhost: forged\r\n{headers}"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


def _attacks(rng: random.Random) -> list[tuple[str, bytes, dict[str, float | bool]]]:
    """Every bad request to try: (family, bytes, how to send them)."""
    good = _request(GOOD_PUSH)
    deep = b"[" * 30_000 + b"]" * 30_000  # within max_body_bytes: the decoder must cope
    deep_metadata = (
        b'{"messages":[{"role":"user","text":"x"}],"metadata":{"a":'
        + b"[" * 5000
        + b"]" * 5000
        + b"}}"
    )
    attacks: list[tuple[str, bytes, dict[str, float | bool]]] = [
        ("random_bytes", rng.randbytes(rng.randint(1, 4000)), {}) for _ in range(RANDOM_PAYLOADS)
    ]
    attacks += [
        ("truncated", good[: rng.randint(1, len(good) - 1)], {}) for _ in range(TRUNCATIONS)
    ]
    attacks += [
        ("invalid_utf8", _request(GOOD_PUSH.replace(b"Turn", b"\xff\xfe\xc3(")), {}),
        (
            "invalid_utf8",
            b"GET /v1/st\xffatus HTTP/1.1\r\nhost: forged\r\nx-a: \xff\xfe\r\n\r\n",
            {},
        ),
        ("deep_json", _request(deep), {}),
        ("deep_json", _request(deep_metadata), {}),
        ("deep_json", _request(b'{"messages":' + b"[" * 50_000), {}),
        ("huge_json", _request(b"[" + b",".join([GOOD_PUSH] * 2000) + b"]"), {}),
        (
            "huge_json",
            b"POST /v1/interactions HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"10000\r\n"
            + b"[" * 65536
            + b"\r\n"
            + b"10000\r\n"
            + b"[" * 65536
            + b"\r\n",
            {},
        ),
        (
            "huge_headers",
            b"GET /v1/status HTTP/1.1\r\nhost: f\r\nx-big: " + b"a" * 20_000 + b"\r\n\r\n",
            {},
        ),
        (
            "huge_headers",
            b"GET /v1/status HTTP/1.1\r\nhost: f\r\n" + b"x-h: 1\r\n" * 3000 + b"\r\n",
            {},
        ),
        ("huge_headers", b"GET /v1/status HTTP/1.1\r\nhost: f\r\nx-big: " + b"a" * 100_000, {}),
        ("slow_headers", good[:60], {"drip": DRIP, "eof": False}),
        ("slow_body", good[: good.index(b"\r\n\r\n") + 10], {"drip": 0.0, "eof": False}),
        ("bad_method", b"BREW /v1/interactions HTTP/1.1\r\nhost: forged\r\n\r\n", {}),
        ("bad_length", b"POST /v1/interactions HTTP/1.1\r\ncontent-length: -5\r\n\r\n", {}),
        (
            "bad_length",
            b"POST /v1/interactions HTTP/1.1\r\ncontent-length: 99999999999999\r\n\r\n",
            {},
        ),
        ("not_http", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + rng.randbytes(64), {}),
    ]
    return attacks


async def _well_behaved(daemon: _Daemon, done: trio.Event, served: list[float]) -> None:
    """A polite client, on a fresh connection each time: it must keep being answered."""
    n = 0
    while not done.is_set():
        started = trio.current_time()
        async with socket_client(daemon.socket) as client:
            response = await client.post("/v1/interactions", json=interaction(f"good-{n}"))
        assert response.status_code == 202, response.text
        served.append(trio.current_time() - started)
        n += 1
        await trio.sleep(0.02)  # a polite pace, not a wait for anything


@pytest.mark.slow  # in the default run too; `-m "not slow"` skips it
async def test_hostile_requests_get_4xx_or_close_and_store_nothing(daemon: _Daemon) -> None:
    """Garbage, truncation, bad UTF-8, deep and huge JSON and headers, slow drips, 1,000 idlers."""
    rng = random.Random(SEED)
    seen: dict[str, list[int | None]] = {}
    served: list[float] = []
    done = trio.Event()
    with trio.fail_after(60 * scaled(1)):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_well_behaved, daemon, done, served)
            for family, payload, how in _attacks(rng):
                status = await _attempt(daemon, payload, **how)  # type: ignore[arg-type]
                seen.setdefault(family, []).append(status)
            idlers = [await trio.open_unix_socket(daemon.socket) for _ in range(IDLE_CONNECTIONS)]
            for n in range(5):  # a fresh connection: the cap must evict an idler to make room
                async with socket_client(daemon.socket) as client:
                    response = await client.post(
                        "/v1/interactions", json=interaction(f"good-idle-{n}")
                    )
                assert response.status_code == 202, response.text
            for idler in idlers:
                await idler.aclose()
            done.set()
    statuses = [s for family in seen.values() for s in family]
    assert [s for s in statuses if s is not None and not 400 <= s < 500] == []
    assert set(seen["slow_headers"]) == {408}
    assert set(seen["slow_body"]) == {408}
    assert set(seen["huge_headers"]) == {431}
    assert set(seen["deep_json"]) <= {400, None}
    assert daemon.process.poll() is None
    stored = [i for (i,) in rows(daemon.db, "SELECT client_id FROM interactions")]
    assert all(i.startswith("good-") for i in stored), stored
    assert len(stored) >= len(served)
    assert "request_failed" not in daemon.log.read_text()
    record(
        "hostile",
        bad_requests=len(statuses) + IDLE_CONNECTIONS,
        by_family={f: len(s) for f, s in seen.items()} | {"idle_connections": IDLE_CONNECTIONS},
        closed_unanswered=statuses.count(None),
        polite_requests=len(served),
        polite_slowest_s=round(max(served), 3),
    )


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "bot", "", "tool"]), "text": st.text(max_size=20)}
    ),
    max_size=3,
)
_near_interaction = st.fixed_dictionaries(
    {"messages": _messages | _json},
    optional={"id": _json, "scope": _json, "metadata": _json, "extra": _json},
)
_bodies = st.one_of(
    st.binary(max_size=300),
    _json.map(lambda v: json.dumps(v).encode()),
    _near_interaction.map(lambda v: json.dumps(v).encode()),
    st.lists(_near_interaction, max_size=3).map(lambda v: "\n".join(map(json.dumps, v)).encode()),
)


@settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
@given(body=_bodies, content_type=st.sampled_from(CONTENT_TYPES))
def test_generated_bodies_never_get_a_500(daemon: _Daemon, body: bytes, content_type: str) -> None:
    """Bodies hypothesis makes up: 202 only for valid interactions, a 4xx otherwise, never a 500."""
    before = rows(daemon.db, "SELECT count(*) FROM interactions")[0][0]
    # A fresh connection for every body; plain HTTP, so no certificate store to load (most of
    # the time an example took).
    transport = httpx.HTTPTransport(uds=daemon.socket, verify=False)
    with httpx.Client(transport=transport, base_url="http://forged") as client:
        response = client.post(
            "/v1/interactions", content=body, headers={"content-type": content_type}
        )
    after = rows(daemon.db, "SELECT count(*) FROM interactions")[0][0]
    assert response.status_code in (202, 400, 413, 415), response.text
    if response.status_code == 202:
        assert after - before == response.json()["accepted"]
    else:
        assert response.json()["error"]["code"] in (
            "invalid_body",
            "unsupported_media_type",
            "body_too_large",
        )
        assert after == before


async def test_deep_json_is_a_400_naming_the_problem(short_tmp: Path) -> None:
    """Nesting past the decoder's or metadata's depth is refused with an exact message."""
    from forged.config import load_config
    from tests.support.daemons import running_daemon

    config = load_config(
        write_config(short_tmp, "http://127.0.0.1:9/v1", distill={"enabled": False}), {}
    )
    deep_metadata = {**interaction("deep"), "metadata": {"a": json.loads("[" * 70 + "]" * 70)}}
    with trio.fail_after(30):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            deepest = b'{"messages":[{"role":"user","text":"x"}],"metadata":{"a":%s}}' % (
                b"[" * 5000 + b"]" * 5000
            )
            decoder = await client.post("/v1/interactions", content=deepest)
            metadata = await client.post("/v1/interactions", json=deep_metadata)
    assert decoder.status_code == metadata.status_code == 400
    assert decoder.json()["error"]["message"] == "the JSON is nested too deeply"
    assert metadata.json()["error"]["message"] == "$.metadata: nested deeper than 64 levels"


async def test_head_on_every_path_is_answered_and_the_daemon_lives(daemon: _Daemon) -> None:
    """HEAD gets GET's status and no body on every path; the daemon stays up."""
    paths = [
        "/v1/health",
        "/v1/status",
        "/v1/facts",
        "/v1/search?q=a",
        "/v1/nope",
        "/v1/consolidate",  # POST only
    ]
    with trio.fail_after(30):
        async with socket_client(daemon.socket) as client:
            answers = {path: await client.head(path) for path in paths}
        async with socket_client(daemon.socket) as client:
            health = await client.get("/v1/health")
    assert {p: (a.status_code, a.content) for p, a in answers.items()} == {
        "/v1/health": (200, b""),
        "/v1/status": (200, b""),
        "/v1/facts": (200, b""),
        "/v1/search?q=a": (200, b""),
        "/v1/nope": (404, b""),
        "/v1/consolidate": (405, b""),
    }
    assert health.status_code == 200
    assert daemon.process.poll() is None


def _fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


async def _flood(path: str) -> list[trio.SocketStream]:
    """FLOOD connections that each send one byte and stay open."""
    needed = 2 * FLOOD  # the flood, the held connections and pytest's own
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the flood needs {needed} open files here; the limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    streams = []
    for _ in range(FLOOD):
        stream = await trio.open_unix_socket(path)
        await stream.send_all(b"G")
        streams.append(stream)
    return streams


@pytest.mark.slow
async def test_emfile_at_a_1024_limit_only_delays_new_connections() -> None:
    """At a 1024 open-file limit, 1,100 one-byte connections make accept() fail with EMFILE: the
    daemon warns, backs off, and serves again once descriptors are free."""
    limits = {**LIMITS, "max_connections": 2 * FLOOD, "header_timeout": 60.0}
    with _spawned(limits=limits, preexec_fn=_fd_limit) as daemon, trio.fail_after(60):
        flood = await _flood(daemon.socket)
        while not daemon.events("accept_failed"):  # seen only in its log
            assert daemon.process.poll() is None, daemon.log.read_text()[-2000:]
            await trio.sleep(0.05)
        assert daemon.process.poll() is None
        for stream in flood:
            await stream.aclose()
        async with socket_client(daemon.socket) as client:
            response = await client.post("/v1/interactions", json=interaction("after-emfile"))
        assert response.status_code == 202, response.text
        assert daemon.process.poll() is None
        [low] = daemon.events("file_limit_low")
        failed = daemon.events("accept_failed")
    assert (low["limit"], low["needed"]) == (FD_LIMIT, 2 * FLOOD + 256)
    assert {e["error"] for e in failed} == {"EMFILE"}
    record("emfile", connections=FLOOD, accept_failed=len(failed))


async def _closed_by_the_daemon(stream: trio.SocketStream, closed: list[bytes]) -> None:
    """Read until the daemon closes the connection (a reset: closed with our byte unread)."""
    answer = b""
    with suppress(trio.BrokenResourceError):
        while chunk := await stream.receive_some(65536):
            answer += chunk
    closed.append(answer)


@pytest.mark.slow
async def test_refusals_at_the_cap_hold_no_descriptors() -> None:
    """At a 1024 limit, 1,100 connections never exhaust descriptors: with the default cap taken
    by requests in progress, the rest get 503 and are closed at once, not after the timeouts."""
    cap = 256
    timeout = 600.0  # header and body timeouts far beyond the test's own deadline
    limits = {**LIMITS, "max_connections": cap, "header_timeout": timeout, "body_timeout": timeout}
    head = b"POST /v1/interactions HTTP/1.1\r\nhost: f\r\ncontent-length: 9\r\nexpect: 100-continue\r\n\r\n"
    closed: list[bytes] = []
    with _spawned(limits=limits, preexec_fn=_fd_limit) as daemon, trio.fail_after(60):
        held = [await trio.open_unix_socket(daemon.socket) for _ in range(cap)]
        for stream in held:  # a request in progress, as `100 Continue` shows: never evicted
            await stream.send_all(head)
            assert (await stream.receive_some(65536)).startswith(b"HTTP/1.1 100 ")
        flood = await _flood(daemon.socket)
        async with trio.open_nursery() as nursery:
            for stream in flood:
                nursery.start_soon(_closed_by_the_daemon, stream, closed)
        for stream in held + flood:
            await stream.aclose()
        assert daemon.process.poll() is None
        assert daemon.events("accept_failed") == []
    refused = [a for a in closed if a.startswith(b"HTTP/1.1 503 ")]
    assert len(refused) == FLOOD
    record("refusals", connections=FLOOD + cap, refused=len(refused))
