"""Shared fixtures: the fake LLM, the daemon in-process or as a real subprocess, socket clients."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from forged.api import Api
from forged.config import Config, load_config
from forged.daemon import run_daemon
from tests.fakellm import FakeLLM

READY_TIMEOUT = 30.0  # seconds a daemon subprocess may take to send READY=1
FAST_BACKOFF = {"backoff_initial": 0.02, "backoff_max": 0.1}  # retries in tests: quick, not zero


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temporary directory: Unix socket paths must stay under 108 bytes."""
    with tempfile.TemporaryDirectory(prefix="fg") as path:
        yield Path(path)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def write_config(directory: Path, llm_url: str, **sections: dict[str, Any]) -> Path:
    """A config file with the socket and database in `directory`; `sections` override keys."""
    tables: dict[str, dict[str, Any]] = {
        "server": {"socket": str(directory / "forged.sock")},
        "store": {"path": str(directory / "forged.db")},
        "distiller": {"base_url": llm_url, **FAST_BACKOFF},
        "log": {"format": "json"},
    }
    for name, keys in sections.items():
        tables.setdefault(name, {}).update(keys)
    text = "\n".join(
        f"[{name}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in keys.items())
        for name, keys in tables.items()
    )
    path = directory / "forged.toml"
    path.write_text(text)
    return path


def socket_client(socket_path: str | Path) -> httpx.AsyncClient:
    """An HTTP client of the daemon's Unix socket."""
    transport = httpx.AsyncHTTPTransport(uds=str(socket_path))
    return httpx.AsyncClient(transport=transport, base_url="http://forged", timeout=30)


@pytest.fixture
async def fake_llm(nursery: trio.Nursery) -> FakeLLM:
    """The fake OpenAI-compatible server, listening on loopback."""
    llm = FakeLLM()
    await nursery.start(llm.serve)
    return llm


@asynccontextmanager
async def running_daemon(config: Config) -> AsyncIterator[Api]:
    """The daemon in this process; cancelled (not drained) when the block ends."""
    async with trio.open_nursery() as nursery:
        api: Api = await nursery.start(run_daemon, config)
        yield api
        nursery.cancel_scope.cancel()


async def wait_for_watermark(
    client: httpx.AsyncClient, seq: int, observer: str = "distill"
) -> dict[str, Any]:
    """Poll-free wait: the daemon's status is read after each batch the fake LLM answers."""
    while True:
        status = (await client.get("/v1/status")).json()
        mine = next(o for o in status["observers"] if o["name"] == observer)
        if mine["watermark"] >= seq:
            return status
        await trio.sleep(0.01)  # the daemon is another party; re-ask shortly


class DaemonProcess:
    """`forged serve` as a real child process; READY=1 arrives on a notify socket of ours."""

    def __init__(self, config_path: Path, directory: Path) -> None:
        self.config_path = config_path
        self.directory = directory
        self.process: trio.Process | None = None
        self.log_path = directory / "daemon.log"
        self.config = load_config(config_path, {})

    @property
    def socket(self) -> str:
        return self.config.server.socket

    async def start(
        self,
        extra_env: dict[str, str] | None = None,
        extra_args: tuple[str, ...] = (),
        ready_timeout: float = READY_TIMEOUT,
    ) -> None:
        notify_path = self.directory / "notify.sock"
        notify_path.unlink(missing_ok=True)
        notify = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_DGRAM)
        await notify.bind(str(notify_path))
        env = {**os.environ, "NOTIFY_SOCKET": str(notify_path), **(extra_env or {})}
        with notify, open(self.log_path, "ab") as log_file:  # noqa: ASYNC230 (a local file, opened once)
            self.process = await trio.lowlevel.open_process(
                [
                    *(sys.executable, "-m", "forged", "serve"),
                    *("--config", str(self.config_path), *extra_args),
                ],
                env=env,
                stderr=log_file,
            )
            with trio.fail_after(ready_timeout):
                while b"READY=1" not in (await notify.recv(4096)).split(b"\n"):
                    pass

    async def kill(self) -> None:
        """SIGKILL: no chance to clean up, as in a crash or power loss."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    async def stop(self, signum: int = signal.SIGTERM) -> int:
        assert self.process is not None
        self.process.send_signal(signum)
        return await self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text()
