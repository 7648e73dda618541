"""Daemons for tests and benchmarks: config files, in-process and child-process daemons, clients."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import msgspec
import trio

from forged.config import Config, load_config, render_toml
from forged.daemon.bundled import usable_cores
from forged.daemon.runner import Running, run_daemon
from forged.hub import Hub

READY_TIMEOUT = 30.0  # seconds a daemon subprocess may take to send READY=1
STATUS_POLL = 0.01  # seconds between status reads of a daemon in another process
FAST_BACKOFF = {"backoff_initial": 0.02, "backoff_max": 0.1}  # retries in tests: quick, not zero
# Threads of a bundled model a test starts: the cores shared among the xdist workers, each of
# which may run one at once. llama.cpp's threads spin while they wait for each other: the two
# end-to-end tests at once on 2 cores took 24 to 89 s with a thread per core each, 8 to 11 s
# with one each.
MODEL_THREADS = max(1, usable_cores() // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


STORE_URL: str | None = None  # the PostgreSQL database of the test running on that backend


def write_config(directory: Path, llm_url: str, **sections: dict[str, Any]) -> Path:
    """A config file with the socket and database in `directory`; `sections` override keys.

    A test on the PostgreSQL backend gets its own database (`STORE_URL`) instead of the file.
    """
    store = {"url": STORE_URL} if STORE_URL else {}
    tables: dict[str, dict[str, Any]] = {
        "server": {"socket": str(directory / "forged.sock")},
        "store": {"path": str(directory / "forged.db"), **store},
        "distiller": {"base_url": llm_url},
        "distill": {**FAST_BACKOFF},
        "bundled": {"threads": MODEL_THREADS},
        "log": {"format": "json"},
    }
    for name, keys in sections.items():
        tables.setdefault(name, {}).update(keys)
    path = directory / "forged.toml"
    path.write_text(render_toml(msgspec.convert(tables, Config)))
    return path


def socket_client(socket_path: str | Path) -> httpx.AsyncClient:
    """An HTTP client of the daemon's Unix socket.

    Plain HTTP on a local socket: no TLS, so no certificate store to load (0.2 s a client).
    """
    transport = httpx.AsyncHTTPTransport(uds=str(socket_path), verify=False)
    return httpx.AsyncClient(transport=transport, base_url="http://forged", timeout=30)


@asynccontextmanager
async def running_daemon(config: Config) -> AsyncIterator[Running]:
    """The daemon in this process; cancelled (not drained) when the block ends."""
    async with trio.open_nursery() as nursery:
        running: Running = await nursery.start(run_daemon, config)
        yield running
        nursery.cancel_scope.cancel()


async def until(hub: Hub, holds: Callable[[], Awaitable[bool]]) -> None:
    """Return once `holds()` is true, checked again at each change of the hub; for a check that
    awaits (reads the store, asks the daemon), during which the last change may happen."""
    while True:
        change = hub.change()
        if await holds():
            return
        await change.wait()


async def wait_for_watermark(
    client: httpx.AsyncClient, seq: int, observer: str = "distill", *, hub: Hub | None = None
) -> dict[str, Any]:
    """The daemon's status once `observer`'s watermark has reached `seq`.

    With the `hub` of a daemon in this process, wait on its change events; a daemon in another
    process has none to offer, so it is asked again every `STATUS_POLL` seconds.
    """
    if hub is not None:
        while hub.progress[observer].status.watermark < seq:
            await hub.changed()
        return dict((await client.get("/v1/status")).json())
    while True:
        status = (await client.get("/v1/status")).json()
        mine = next(o for o in status["observers"] if o["name"] == observer)
        if mine["watermark"] >= seq:
            return dict(status)
        await trio.sleep(STATUS_POLL)


SYSTEMD_VARIABLES = frozenset(  # set by a service manager; a daemon under test never inherits them
    {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"}
    | {"JOURNAL_STREAM"}
)
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class NotifySocket:
    """A datagram socket standing where systemd's notify socket would, as systemd reads it.

    `SO_PASSCRED` makes the kernel attach the sender's pid to every datagram, which is how
    systemd tells the main process's notifications from others (`NotifyAccess=main`).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.received: list[tuple[int, list[str]]] = []  # (sender pid, assignments) in order
        self._sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_DGRAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)

    async def bind(self) -> None:
        self.path.unlink(missing_ok=True)
        await self._sock.bind(str(self.path))

    async def receive(self) -> tuple[int, list[str]]:
        """The next datagram: its sender's pid and its KEY=value assignments."""
        data, ancdata, _, _ = await self._sock.recvmsg(65536, socket.CMSG_SPACE(_UCRED.size))
        pids = [
            _UCRED.unpack(raw)[0]
            for level, kind, raw in ancdata
            if (level, kind) == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS)
        ]
        self.received.append((pids[0], data.decode().split("\n")))
        return self.received[-1]

    async def wait_for(self, assignment: str) -> tuple[int, list[str]]:
        """Receive until a datagram holds `assignment` (`READY=1`, `STOPPING=1`...); return it."""
        while assignment not in (got := await self.receive())[1]:
            pass
        return got

    def close(self) -> None:
        self._sock.close()
        self.path.unlink(missing_ok=True)


class DaemonProcess:
    """`forged serve` as a real child process; READY=1 arrives on a notify socket of ours.

    `wrapper` runs the daemon through another command (systemd-socket-activate, a namespace
    helper); signals then go to the daemon itself, whose pid READY=1 carries.
    """

    def __init__(self, config_path: Path, directory: Path) -> None:
        self.config_path = config_path
        self.directory = directory
        self.process: trio.Process | None = None
        self.notify: NotifySocket | None = None
        self.pid: int | None = None  # the daemon's own pid, known once it is ready
        self.log_path = directory / "daemon.log"
        self.output_path = directory / "daemon.out"  # standard output (a wrapper's report)
        self.config = load_config(config_path, {})

    @property
    def socket(self) -> str:
        return self.config.server.socket

    async def spawn(
        self,
        extra_env: dict[str, str] | None = None,
        wrapper: Sequence[str] = (),
        extra_args: Sequence[str] = (),
    ) -> None:
        """Start the process and return at once; `wait_ready` waits for READY=1."""
        self.notify = NotifySocket(self.directory / "notify.sock")
        await self.notify.bind()
        inherited = {k: v for k, v in os.environ.items() if k not in SYSTEMD_VARIABLES}
        env = {**inherited, "NOTIFY_SOCKET": str(self.notify.path), **(extra_env or {})}
        command = [sys.executable, "-m", "forged", "serve", "--config", str(self.config_path)]
        command += extra_args
        with open(self.log_path, "ab") as log_file, open(self.output_path, "ab") as out_file:  # noqa: ASYNC230 (local, once)
            self.process = await trio.lowlevel.open_process(
                [*wrapper, *command], env=env, stdout=out_file, stderr=log_file
            )

    async def wait_ready(self, ready_timeout: float = READY_TIMEOUT) -> list[str]:
        """Wait for READY=1 and return that datagram's assignments."""
        assert self.notify is not None
        with trio.fail_after(ready_timeout):
            self.pid, assignments = await self.notify.wait_for("READY=1")
        return assignments

    async def start(
        self,
        extra_env: dict[str, str] | None = None,
        wrapper: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        ready_timeout: float = READY_TIMEOUT,
    ) -> None:
        await self.spawn(extra_env, wrapper, extra_args)
        await self.wait_ready(ready_timeout)

    def send_signal(self, signum: int) -> None:
        assert self.process is not None
        os.kill(self.pid or self.process.pid, signum)

    async def wait(self) -> int:
        """Wait for the process (the wrapper, if any) to exit; its exit status."""
        assert self.process is not None and self.notify is not None
        status = await self.process.wait()
        self.notify.close()
        return status

    async def kill(self) -> None:
        """SIGKILL: no chance to clean up, as in a crash or power loss."""
        self.send_signal(signal.SIGKILL)
        await self.wait()

    async def stop(self, signum: int = signal.SIGTERM) -> int:
        self.send_signal(signum)
        return await self.wait()

    async def __aenter__(self) -> DaemonProcess:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """A test that failed halfway must not leave its daemon running."""
        if self.process is None:
            return
        if self.process.returncode is None:
            for pid in {self.pid, self.process.pid} - {None}:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)  # the daemon and any wrapper around it
        with trio.CancelScope(shield=True):
            await self.wait()

    def log(self) -> str:
        return self.log_path.read_text()

    def events(self, name: str) -> list[dict[str, Any]]:
        """The daemon's JSON log entries of event `name`."""
        entries = [json.loads(line) for line in self.log().splitlines() if line.startswith("{")]
        return [e for e in entries if e.get("event") == name]
