"""The command line against a real daemon: push, status, and a daemon that is not there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from forged.config import Config

TURN = {"messages": [{"role": "user", "text": "I prefer dark mode."}]}


async def forged(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """Run the `forged` command as a user would, in a child process."""
    return await trio.run_process(
        [sys.executable, "-m", "forged", *args],
        stdin=stdin,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


async def test_push_file_prints_the_answer(daemon: Config, short_tmp: Path) -> None:
    """`forged push FILE` sends a JSON file and prints the daemon's answer."""
    path = short_tmp / "turn.json"
    path.write_text(json.dumps(TURN))
    result = await forged("push", "--socket", daemon.server.socket, str(path))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"accepted": 1, "duplicates": 0, "last_seq": 1}


async def test_push_ndjson_from_stdin(daemon: Config) -> None:
    """NDJSON on standard input is recognised and sent as NDJSON."""
    lines = (json.dumps(TURN) + "\n") * 3
    result = await forged("push", "--socket", daemon.server.socket, "-", stdin=lines.encode())
    assert json.loads(result.stdout) == {"accepted": 3, "duplicates": 0, "last_seq": 3}


async def test_push_rejection_is_one_line(daemon: Config) -> None:
    """A rejected push prints the status, code and message, and exits 1."""
    result = await forged("push", "--socket", daemon.server.socket, "-", stdin=b'{"messages": []}')
    assert result.returncode == 1
    assert result.stderr.decode() == (
        "forged: 400 invalid_body: $.messages: Expected `array` of length >= 1\n"
    )


async def test_status_is_readable_and_json(daemon: Config) -> None:
    """`forged status` reads well; `--json` prints the raw answer."""
    readable = await forged("status", "--socket", daemon.server.socket)
    assert readable.returncode == 0
    assert "distill: idle, watermark 0, backlog 0" in readable.stdout.decode()
    raw = await forged("status", "--json", "--socket", daemon.server.socket)
    assert json.loads(raw.stdout)["log"] == {"last_seq": 0, "count": 0}


async def test_daemon_not_running_is_one_clear_line(short_tmp: Path) -> None:
    """No daemon: one line naming the socket, no traceback, exit 1."""
    socket = short_tmp / "absent.sock"
    result = await forged("status", "--socket", str(socket))
    assert result.returncode == 1
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"forged: cannot reach forged at {socket} (")
    assert lines[0].endswith("); is the daemon running?")


@pytest.mark.parametrize("extra", [[], ["--bundled-llm"]])
async def test_second_daemon_on_a_live_socket_exits_2(
    daemon: Config, short_tmp: Path, extra: list[str]
) -> None:
    """`forged serve` never steals a running daemon's socket; it says so in one line, before
    it starts anything (not even the bundled model)."""
    result = await forged("serve", "--config", str(short_tmp / "forged.toml"), *extra)
    assert result.returncode == 2
    assert "bundled_llm" not in result.stderr.decode()
    assert result.stderr.decode().splitlines()[-1] == (
        f"forged: another forged is already serving on {daemon.server.socket}; stop it first,"
        " or give this one another [server] socket"
    )
