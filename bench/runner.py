"""The real daemon as a subprocess (the tests' own), a lean client, and the fake LLM in-process."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

import msgspec
import trio

from tests.support.daemons import DaemonProcess, write_config
from tests.support.fakellm import FakeLLM

READY_TIMEOUT = 600.0  # seconds; a large store on a cold page cache opens slowly
STOP_TIMEOUT = 30.0  # seconds after SIGTERM before SIGKILL
SHUTDOWN_GRACE = 0.5  # seconds the daemon drains on stop: a benchmark waits for nothing
STATUS_POLL = 0.02  # seconds between status reads while waiting on the daemon (another process)
RECEIVE_SIZE = 65536
_TICKS = os.sysconf("SC_CLK_TCK")  # clock ticks per second, /proc's unit of CPU time


class Client:
    """A lean keep-alive HTTP/1.1 client, so that the client is never what is measured."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._buffer = b""

    @classmethod
    async def connect(cls, socket_path: str) -> Client:
        return cls(await trio.open_unix_socket(socket_path))

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def _fill(self) -> None:
        data = await self._stream.receive_some(RECEIVE_SIZE)
        if not data:
            raise ConnectionError("the daemon closed the connection")
        self._buffer += data

    async def request(
        self, method: str, target: str, body: bytes = b"", content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        """Send one request and read its whole answer: status and body."""
        head = (
            f"{method} {target} HTTP/1.1\r\nhost: forged\r\ncontent-type: {content_type}\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        )
        await self._stream.send_all(head.encode() + body)
        while b"\r\n\r\n" not in self._buffer:
            await self._fill()
        raw_head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        lines = raw_head.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        length = int(headers["content-length"])
        while len(self._buffer) < length:
            await self._fill()
        answer, self._buffer = self._buffer[:length], self._buffer[length:]
        return int(lines[0].split()[1]), answer

    async def get(self, target: str) -> Any:
        status, body = await self.request("GET", target)
        if status != 200:
            raise RuntimeError(f"GET {target}: {status} {body[:200]!r}")
        return msgspec.json.decode(body)

    async def push(self, body: bytes, content_type: str = "application/json") -> Any:
        status, answer = await self.request("POST", "/v1/interactions", body, content_type)
        if status != 202:
            raise RuntimeError(f"push: {status} {answer[:200]!r}")
        return msgspec.json.decode(answer)


class Daemon(DaemonProcess):
    """`forged serve` as a child process of ours, timed from spawn to READY=1."""

    ready_after = 0.0  # seconds from spawning the process to READY=1

    def peak_rss_mib(self) -> float:
        """VmHWM: the most resident memory the process has used so far."""
        assert self.process is not None
        return peak_rss_mib(self.process.pid)

    async def client(self) -> Client:
        return await Client.connect(self.socket)


async def index_ready(client: Client) -> dict[str, Any]:
    """The daemon's status once its turn index holds the whole log."""
    while True:
        status: dict[str, Any] = await client.get("/v1/status")
        if status["index"]["backlog"] == 0 and status["index"]["state"] == "ready":
            return status
        await trio.sleep(STATUS_POLL)  # another process: its events cannot reach us


def peak_rss_mib(pid: int | str) -> float:
    with open(f"/proc/{pid}/status") as f:
        kib = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    return int(kib) / 1024


@asynccontextmanager
async def running(
    directory: Path, llm_url: str, **sections: dict[str, Any]
) -> AsyncIterator[Daemon]:
    """A daemon on a config in `directory`, ready on entry, stopped on exit (killed if slow)."""
    await trio.Path(directory).mkdir(parents=True, exist_ok=True)
    sections["server"] = {"shutdown_grace": SHUTDOWN_GRACE, **sections.get("server", {})}
    async with Daemon(write_config(directory, llm_url, **sections), directory) as daemon:
        started = time.perf_counter()
        await daemon.start(ready_timeout=READY_TIMEOUT)
        daemon.ready_after = time.perf_counter() - started
        try:
            yield daemon
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(STOP_TIMEOUT):
                await daemon.stop()  # past the timeout, leaving the block kills it


@asynccontextmanager
async def fake_llm(latency: float = 0.0, default: str = "ok") -> AsyncIterator[FakeLLM]:
    """The fake OpenAI-compatible server from the tests, on loopback, in this process."""
    llm = FakeLLM(latency=latency)
    llm.default = default
    async with trio.open_nursery() as nursery:
        await nursery.start(llm.serve)
        yield llm
        nursery.cancel_scope.cancel()


async def distill_status(client: Client) -> dict[str, Any]:
    status = await client.get("/v1/status")
    distill: dict[str, Any] = next(o for o in status["observers"] if o["name"] == "distill")
    return distill


async def wait_drained(client: Client, last_seq: int) -> dict[str, Any]:
    """Re-read the status until the distill watermark reaches `last_seq`."""
    while (status := await distill_status(client))["watermark"] < last_seq:  # noqa: ASYNC110 - another process: no event to wait on
        await trio.sleep(STATUS_POLL)  # the daemon is another process: re-ask shortly
    return status


_UNEMBEDDED = """
    SELECT (SELECT count(*) FROM interactions) + (SELECT count(*) FROM facts)
        + (SELECT count(*) FROM summaries) - (SELECT count(*) FROM vectors)
"""  # the turns, facts and summaries still without a vector
EMBED_POLL = 0.5  # seconds between two looks at the embed observer's progress


def _unembedded(database: Path) -> int:
    with closing(sqlite3.connect(database)) as db:
        left: int = db.execute(_UNEMBEDDED).fetchone()[0]
    return left


async def wait_embedded(client: Client, last_seq: int, database: Path) -> None:
    """Wait until the embed observer has every turn, and the store a vector for every fact
    and summary: the observer counts facts in its backlog only once it has looked for them
    (each second at most), so its status alone cannot say when the last ones are done."""
    while True:
        status = await client.get("/v1/status")
        embed = next(o for o in status["observers"] if o["name"] == "embed")
        if embed["watermark"] >= last_seq and _unembedded(database) == 0:
            return
        await trio.sleep(EMBED_POLL)  # another process: no event to wait on


def cpu_seconds(pids: set[int]) -> float:
    """User and system CPU seconds the processes have used so far (those still alive)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICKS


def children() -> set[int]:
    """The pids of this process's children (a daemon's launcher, a model server)."""
    mine = str(os.getpid())
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[1] == mine:
                found.add(int(stat.parent.name))
        except OSError:
            continue
    return found
