"""Files a user names, under SIGKILL: a backup, a refused restore and an import killed midway
lose no interaction the daemon acknowledged."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import trio

from tests.support.daemons import DaemonProcess, socket_client, write_config
from tests.support.fakellm import FakeLLM

IMPORT_TURNS = 20_000  # enough chunks that the daemon dies while the import still runs
POLL = 0.01  # seconds between looks at a file or a count another process changes

pytestmark = [pytest.mark.integration, pytest.mark.sqlite_only]


def _export(path: Path, turns: int) -> None:
    """A ChatGPT export of one-turn conversations."""
    conversations = [
        {
            "id": f"c{n}",
            "current_node": "a",
            "mapping": {
                "q": {
                    "parent": None,
                    "message": {
                        "id": "q",
                        "author": {"role": "user"},
                        "content": {"content_type": "text", "parts": [f"question {n}"]},
                    },
                },
                "a": {
                    "parent": "q",
                    "message": {
                        "id": "a",
                        "author": {"role": "assistant"},
                        "content": {"content_type": "text", "parts": [f"answer {n}"]},
                    },
                },
            },
        }
        for n in range(turns)
    ]
    path.write_text(json.dumps(conversations))


def _count(database: Path, where: str = "1") -> int:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        return int(db.execute(f"SELECT count(*) FROM interactions WHERE {where}").fetchone()[0])


def _ids(database: Path) -> set[str]:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        return {i for (i,) in db.execute("SELECT client_id FROM interactions") if i}


class _Pusher:
    """Pushes one interaction after another; keeps the ids answered 202."""

    def __init__(self, socket: str) -> None:
        self.socket = socket
        self.acknowledged: set[str] = set()

    async def run(self) -> None:
        n = 0
        while True:
            turn = {"id": f"p-{n}", "messages": [{"role": "user", "text": f"turn {n}"}]}
            try:
                async with socket_client(self.socket) as client:
                    answer = await client.post("/v1/interactions", json=turn)
                if answer.status_code == 202:
                    self.acknowledged.add(turn["id"])
                    n += 1
            except httpx.TransportError:
                pass  # the daemon is down: not acknowledged, pushed again
            await trio.sleep(POLL)


async def _forged(*args: str) -> trio.Process:
    command = [sys.executable, "-m", "forged", *args]
    return await trio.lowlevel.open_process(command, stdout=-1, stderr=-1)  # pipes


async def _until(holds: Callable[[], bool]) -> None:
    """Another process changes what `holds` reads: there is no event of ours to wait on."""
    while not holds():  # noqa: ASYNC110 (a file or a count of another process)
        await trio.sleep(POLL)


async def _output(process: trio.Process) -> tuple[int, str]:
    assert process.stderr is not None
    err = b""
    async with process.stderr:
        async for chunk in process.stderr:
            err += chunk
    return await process.wait(), err.decode()


async def test_sigkill_during_backup_restore_and_import_loses_nothing_acknowledged(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """A backup killed mid-copy, a restore killed and one refused under the live daemon, and
    a daemon killed mid-import: after a restart every acknowledged interaction is stored, the
    import says how far it got, and importing again stores exactly the rest."""
    config = write_config(short_tmp, fake_llm.base_url)
    daemon = DaemonProcess(config, short_tmp)
    database = Path(daemon.config.store.path)
    export = short_tmp / "conversations.json"
    _export(export, IMPORT_TURNS)
    pusher = _Pusher(daemon.socket)
    with trio.fail_after(240):
        async with daemon, trio.open_nursery() as nursery:
            await daemon.start()
            nursery.start_soon(pusher.run)
            await _until(lambda: len(pusher.acknowledged) >= 20)
            done = await _forged("backup", str(short_tmp / "ok.db"), "--config", str(config))
            assert (await _output(done))[0] == 0
            # a big import makes the database big enough for the backup to be caught midway
            importing = await _forged("import", "chatgpt", str(export), "--socket", daemon.socket)
            await _until(lambda: _count(database, "client_id LIKE 'chatgpt:%'") >= 1000)
            backup = await _forged("backup", str(short_tmp / "b.db"), "--config", str(config))
            partial = short_tmp / ".b.db.partial"
            await _until(lambda: partial.exists() or backup.poll() is not None)
            backup.send_signal(signal.SIGKILL)
            await backup.wait()
            restore = ("restore", "--yes", str(short_tmp / "ok.db"), "--config", str(config))
            killed = await _forged(*restore)
            killed.send_signal(signal.SIGKILL)
            await killed.wait()
            code, err = await _output(await _forged(*restore))
            assert (code, err) == (
                1,
                f"forged: forged is running on {database} (or on another"
                " database in its directory); stop it first (Ctrl-C the"
                " `forged serve` or `make run` serving it)\n",
            )
            assert importing.poll() is None, "the import ended before the daemon was killed"
            await daemon.kill()
            code, err = await _output(importing)
            nursery.cancel_scope.cancel()
        assert code == 1, err
        stopped = re.search(
            r"the import of conversations\.json stopped at \$\[\d+\]: (\d+) new"
            r" turns and 0 already stored were acknowledged before",
            err,
        )
        assert stopped, err
        assert "import the file again to go on" in err
        async with daemon:
            await daemon.start()
            assert pusher.acknowledged - _ids(database) == set(), "an acknowledged push was lost"
            imported = _count(database, "client_id LIKE 'chatgpt:%'")
            assert imported >= int(stopped.group(1))
            again = await trio.run_process(
                [
                    sys.executable,
                    "-m",
                    "forged",
                    "import",
                    "chatgpt",
                    str(export),
                    "--socket",
                    daemon.socket,
                ],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            assert again.stdout.decode() == (
                f"imported conversations.json: {IMPORT_TURNS - imported} new turns,"
                f" {imported} already stored, 0 skipped\n"
            ), again.stderr
            assert await daemon.stop() == 0
    assert _count(database, "client_id LIKE 'chatgpt:%'") == IMPORT_TURNS
