"""Disk full: pushes get 507, what was accepted stays intact, and the daemon recovers by itself."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import trio

from forged.config import load_config
from forged.daemon.runner import Running
from tests.support.daemons import (
    READY_TIMEOUT,
    running_daemon,
    socket_client,
    wait_for_watermark,
    write_config,
)
from tests.support.data import facts_per_seq, integrity, interaction, rows, summaries_per_seq
from tests.support.fakellm import FakeLLM
from tests.support.reliability import record, scaled

MAX_PUSHES = scaled(2000)  # pushes tried before the disk must have filled up
AFTER = scaled(20)  # interactions pushed once space is back
TMPFS_SIZE = "4m"  # the tmpfs the database lives on in the mount-namespace variant
BALLAST_BYTES = 3 * 1024 * 1024  # freed to let space return: enough for a checkpoint too
FULL_MESSAGE = "the disk holding the database is full; nothing of this request was stored"

pytestmark = (
    pytest.mark.sqlite_only
)  # a full disk under SQLite's file; PostgreSQL's is its server's


def _big(key: str) -> dict[str, object]:
    return interaction(key, text=f"Turn {key}. " + "x" * 2000)


async def _fill(client: httpx.AsyncClient, prefix: str) -> tuple[set[str], httpx.Response]:
    """Push until the daemon answers something other than 202; return what was acknowledged."""
    acknowledged: set[str] = set()
    for n in range(MAX_PUSHES):
        key = f"{prefix}-{n}"
        response = await client.post(
            "/v1/interactions", json=interaction(key, text=f"Turn {key}. " + "x" * 2000)
        )
        if response.status_code != 202:
            return acknowledged, response
        acknowledged.add(key)
    raise AssertionError(f"the disk never filled up in {MAX_PUSHES} pushes")


async def _until_commit_blocked(client: httpx.AsyncClient) -> None:
    """Wait until the distill observer has a batch it cannot commit for lack of space."""
    while True:  # the observer's error is visible only through /v1/status
        distill = (await client.get("/v1/status")).json()["observers"][0]
        if distill["last_error"] == "the disk holding the database is full":
            return
        await trio.sleep(0.01)  # re-ask the daemon shortly


def _check_full(response: httpx.Response) -> None:
    assert response.status_code == 507, response.text
    assert response.json()["error"] == {"code": "storage_full", "message": FULL_MESSAGE}


async def _recover(
    client: httpx.AsyncClient, llm: FakeLLM, database: Callable[[], str], acknowledged: set[str]
) -> int:
    """Push again once space is back, wait for distillation, check each seq has one result."""
    for n in range(AFTER):
        response = await client.post("/v1/interactions", json=interaction(f"after-{n}"))
        assert response.status_code == 202, response.text
        acknowledged.add(f"after-{n}")
    last_seq = int(response.json()["last_seq"])
    status = await wait_for_watermark(client, last_seq)
    assert llm.calls == status["observers"][0]["llm_calls"], "a blocked commit kept its batch"
    db = database()
    stored = {i for (i,) in rows(db, "SELECT client_id FROM interactions")}
    assert stored == acknowledged
    assert facts_per_seq(db) == dict.fromkeys(range(1, last_seq + 1), 1)
    assert summaries_per_seq(db) == dict.fromkeys(range(1, last_seq + 1), 1)
    assert integrity(db) == "ok"
    return last_seq


async def _limit_pages(api: Running, pages: int) -> None:
    """Cap the size of the daemon's database through its own writer (a per-connection limit)."""
    await api.store._write(lambda c: c.execute(f"PRAGMA max_page_count = {pages}"))


async def test_size_limit_gives_507_and_recovers_without_restart(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Portable variant: SQLite's max_page_count makes SQLITE_FULL; raising it again heals."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(60):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            pages = (await api.store.read(lambda c: c.execute("PRAGMA page_count").fetchone()))[0]
            await _limit_pages(api, pages + 40)
            await fake_llm.go_down()  # nothing distilled while filling: the commit comes when full
            acknowledged, refused = await _fill(client, "full")
            before_full = len(acknowledged)
            _check_full(refused)
            _check_full(await client.post("/v1/interactions", json=_big("refused")))
            await fake_llm.come_back()
            await _until_commit_blocked(client)
            await _limit_pages(api, 1073741823)
            last_seq = await _recover(client, fake_llm, lambda: config.store.path, acknowledged)
    record(
        "disk_full_max_page_count",
        accepted_before_full=before_full,
        last_seq=last_seq,
        lost=0,
    )


def _can_mount_tmpfs() -> bool:
    return sys.platform == "linux" and os.geteuid() == 0 and shutil.which("unshare") is not None


async def _start_in_namespace(config: Path, data: Path, directory: Path) -> trio.Process:
    """`forged serve` in a private mount namespace with `data` on a small tmpfs of its own."""
    notify_path = directory / "notify.sock"
    notify = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_DGRAM)
    await notify.bind(str(notify_path))
    script = f'mount -t tmpfs -o size={TMPFS_SIZE} forged-test "$1" && shift && exec "$@"'
    argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", str(data)]
    argv += [sys.executable, "-m", "forged", "serve", "--config", str(config)]
    env = {**os.environ, "NOTIFY_SOCKET": str(notify_path)}
    with notify, open(directory / "daemon.log", "ab") as log:  # noqa: ASYNC230 (a local log file, opened once)
        process = await trio.lowlevel.open_process(argv, env=env, stderr=log)
        with trio.fail_after(READY_TIMEOUT):
            while b"READY=1" not in (await notify.recv(4096)).split(b"\n"):
                pass
    return process


def _ballast(path: Path) -> None:
    """Take a share of the tmpfs, as some other file would, to be deleted when space must return."""
    with open(path, "wb") as f:
        f.write(b"\0" * BALLAST_BYTES)


def _copy_out(inside: Path, directory: Path) -> str:
    """A copy of the quiescent database: SQLite resolves /proc/PID/root to our own root."""
    for name in ("forged.db", "forged.db-wal"):
        shutil.copyfile(inside / name, directory / name)
    return str(directory / "forged.db")


@pytest.mark.skipif(
    not _can_mount_tmpfs(), reason="needs root and unshare to mount a private tmpfs"
)
async def test_full_tmpfs_gives_507_and_recovers_when_space_returns(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """A real ENOSPC: the database on a full tmpfs; deleting a ballast file heals it, no restart."""
    data = short_tmp / "data"
    data.mkdir()
    config = write_config(short_tmp, fake_llm.base_url, store={"path": str(data / "forged.db")})
    socket_path = load_config(config, {}).server.socket
    with trio.fail_after(60):
        process = await _start_in_namespace(config, data, short_tmp)
        try:
            inside = Path(f"/proc/{process.pid}/root") / data.relative_to(
                "/"
            )  # the tmpfs, seen from here
            async with socket_client(socket_path) as client:
                _ballast(inside / "ballast")
                await fake_llm.go_down()  # nothing distilled while filling
                acknowledged, refused = await _fill(client, "tmpfs")
                before_full = len(acknowledged)
                _check_full(refused)
                _check_full(await client.post("/v1/interactions", json=_big("refused")))
                await fake_llm.come_back()
                await _until_commit_blocked(client)
                (inside / "ballast").unlink()
                last_seq = await _recover(
                    client, fake_llm, lambda: _copy_out(inside, short_tmp), acknowledged
                )
        finally:
            process.send_signal(signal.SIGKILL)
            await process.wait()
    record(
        "disk_full_tmpfs",
        tmpfs=TMPFS_SIZE,
        accepted_before_full=before_full,
        ballast_bytes=BALLAST_BYTES,
        last_seq=last_seq,
        lost=0,
    )
