"""Tests for forged.daemon.systemd against real sockets and the real systemd-socket-activate tool."""

from __future__ import annotations

import array
import fcntl
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forged.daemon import systemd

TIMEOUT = 10.0  # seconds any socket wait or child process may take
BIG_VALUE_BYTES = 300 * 1024  # above one datagram's limit (net.core.wmem_default, 208 KiB)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _closed_notifier() -> Iterator[None]:
    """notify() keeps its socket open for the process's life; a test closes what it opened."""
    yield
    systemd.close_notify()


def dgram_server(address: str | Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(address))
    server.settimeout(TIMEOUT)
    return server


def parse_native(data: bytes) -> list[tuple[str, bytes]]:
    """Decode journald's native format: KEY=value lines or KEY, newline, u64 length, bytes."""
    fields, pos = [], 0
    while pos < len(data):
        line_end = data.index(b"\n", pos)
        line = data[pos:line_end]
        if b"=" in line:
            key, _, value = line.partition(b"=")
            pos = line_end + 1
        else:
            key, (size,) = line, struct.unpack_from("<Q", data, line_end + 1)
            start = line_end + 9
            value, pos = data[start : start + size], start + size + 1
            assert data[pos - 1 : pos] == b"\n"
        fields.append((key.decode(), value))
    return fields


# notify


def test_notify_sends_one_datagram_to_a_path_socket(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """notify() joins its assignments with newlines into one datagram to $NOTIFY_SOCKET."""
    with dgram_server(sock_dir / "notify") as server:
        monkeypatch.setenv("NOTIFY_SOCKET", str(sock_dir / "notify"))
        assert systemd.notify("READY=1", "STATUS=listening on api") is True
        assert server.recv(4096) == b"READY=1\nSTATUS=listening on api"


def test_notify_reaches_an_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    """An @name address goes to the abstract namespace."""
    name = f"forged-test-notify-{os.getpid()}"
    with dgram_server("\0" + name) as server:
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert systemd.notify("WATCHDOG=1") is True
        assert server.recv(4096) == b"WATCHDOG=1"


def test_notify_reuses_one_socket(sock_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frequent calls (the watchdog loop) open no new descriptors."""
    with dgram_server(sock_dir / "notify") as server:
        monkeypatch.setenv("NOTIFY_SOCKET", str(sock_dir / "notify"))
        systemd.notify("WATCHDOG=1")
        open_fds = len(os.listdir("/proc/self/fd"))
        for _ in range(50):
            assert systemd.notify("WATCHDOG=1")
            assert server.recv(4096) == b"WATCHDOG=1"
        assert len(os.listdir("/proc/self/fd")) == open_fds


def test_close_notify_leaves_no_socket_open(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close_notify closes the socket notify opened; a later notify opens a new one."""
    server = dgram_server(sock_dir / "notify")
    monkeypatch.setenv("NOTIFY_SOCKET", str(sock_dir / "notify"))
    systemd.close_notify()
    before = set(os.listdir("/proc/self/fd"))
    assert systemd.notify("STATUS=one")
    systemd.close_notify()
    assert set(os.listdir("/proc/self/fd")) == before
    assert systemd.notify("STATUS=two")
    systemd.close_notify()
    assert [server.recv(64), server.recv(64)] == [b"STATUS=one", b"STATUS=two"]
    server.close()


def test_notify_without_systemd_is_false(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside systemd there is no $NOTIFY_SOCKET and nothing is sent."""
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert systemd.notify("READY=1") is False


def test_notify_to_a_missing_socket_is_false(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notify socket that went away makes notify() return False, not raise."""
    monkeypatch.setenv("NOTIFY_SOCKET", str(sock_dir / "gone"))
    assert systemd.notify("READY=1") is False


_NOTIFY_FLOOD_CHILD = textwrap.dedent(
    """
    from forged.daemon import systemd

    print(sum(systemd.notify("WATCHDOG=1") for _ in range(100)))
    """
)


def test_notify_never_blocks_on_a_full_receiver(sock_dir: Path) -> None:
    """A receiver that never reads fills its queue; later sends return False instead of waiting."""
    with dgram_server(sock_dir / "notify"):
        env = {**os.environ, "NOTIFY_SOCKET": str(sock_dir / "notify")}
        child = [sys.executable, "-c", _NOTIFY_FLOOD_CHILD]
        done = subprocess.run(child, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert 0 < int(done.stdout) < 100  # some queued (net.unix.max_dgram_qlen), the rest refused


def test_notify_rejects_a_multi_line_assignment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A newline would split one assignment into two, so it is refused."""
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    with pytest.raises(ValueError, match=r"^a notify assignment is one KEY=value line, got "):
        systemd.notify("STATUS=a\nREADY=1")


# watchdog


@pytest.mark.parametrize(
    ("usec", "pid", "expected"),
    [
        ("30000000", None, 15.0),
        ("30000000", "self", 15.0),
        ("1000000", "1", None),  # meant for another process
        (None, None, None),
        ("0", None, None),
        ("soon", None, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec(
    monkeypatch: pytest.MonkeyPatch, usec: str | None, pid: str | None, expected: float | None
) -> None:
    """Ping twice per WatchdogSec=, only when the watchdog is ours."""
    for name, value in (("WATCHDOG_USEC", usec), ("WATCHDOG_PID", pid)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, str(os.getpid()) if value == "self" else value)
    assert systemd.watchdog_interval() == expected


# listen_fds

_ACTIVATED_CHILD = textwrap.dedent(
    """
    import json, os, socket
    from forged.daemon import systemd

    sockets = systemd.listen_fds()
    report = {
        "names": [s.name for s in sockets],
        "fds": [s.socket.fileno() for s in sockets],
        "paths": [s.socket.getsockname() for s in sockets],
        "types": [s.socket.type == socket.SOCK_STREAM for s in sockets],
        "inheritable": [os.get_inheritable(s.socket.fileno()) for s in sockets],
        "env_left": sorted(k for k in os.environ if k.startswith("LISTEN_")),
        "again": len(systemd.listen_fds()),
    }
    conn, _ = sockets[0].socket.accept()
    conn.sendall(json.dumps(report).encode())
    conn.close()
    """
)


@pytest.mark.skipif(
    shutil.which("systemd-socket-activate") is None, reason="systemd-socket-activate not installed"
)
def test_listen_fds_takes_sockets_from_systemd_socket_activate(sock_dir: Path) -> None:
    """Sockets handed over by socket activation come back named, listening and close-on-exec."""
    api, admin = sock_dir / "api.sock", sock_dir / "admin.sock"
    command = ["systemd-socket-activate", "-l", str(api), "-l", str(admin), "--fdname=api:admin"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = [*command, sys.executable, "-c", _ACTIVATED_CHILD]
    with subprocess.Popen(child, env=env, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        try:
            for path in (api, admin):  # logged once the socket listens
                assert proc.stderr.readline().startswith(f"Listening on {path} as ")
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.settimeout(TIMEOUT)
                client.connect(str(api))
                report = json.loads(b"".join(iter(lambda: client.recv(4096), b"")))
        finally:
            _, errors = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, errors
    assert report == {
        "names": ["api", "admin"],
        "fds": [3, 4],
        "paths": [str(api), str(admin)],
        "types": [True, True],
        "inheritable": [False, False],
        "env_left": [],
        "again": 0,
    }


def test_listen_fds_ignores_sockets_meant_for_another_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    """A LISTEN_PID that is not ours yields nothing, and the variables are still removed."""
    monkeypatch.setenv("LISTEN_PID", str(os.getppid()))
    monkeypatch.setenv("LISTEN_FDS", "1")
    monkeypatch.setenv("LISTEN_FDNAMES", "api")
    assert systemd.listen_fds() == []
    assert not {"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} & set(os.environ)


def test_listen_fds_without_activation_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """Started by hand there are no passed sockets."""
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        monkeypatch.delenv(name, raising=False)
    assert systemd.listen_fds() == []


# journal stream


def test_journal_stream_matches_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    """$JOURNAL_STREAM naming stderr's device and inode means stderr goes to the journal."""
    stat = os.fstat(2)
    monkeypatch.setenv("JOURNAL_STREAM", f"{stat.st_dev}:{stat.st_ino}")
    assert systemd.journal_stream_connected() is True


@pytest.mark.parametrize("value", [None, "", "1:2:3", "x:y", "0:0"])
def test_journal_stream_mismatch_is_false(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    """A missing, malformed or inherited (other file) $JOURNAL_STREAM is not ours."""
    if value is None:
        monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    else:
        monkeypatch.setenv("JOURNAL_STREAM", value)
    assert systemd.journal_stream_connected() is False


# journal field names


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("observer", "OBSERVER"),
        ("batch_id", "BATCH_ID"),
        ("llm_ms", "LLM_MS"),
        ("llm-ms.total", "LLM_MS_TOTAL"),
        ("_pid", "PID"),
        ("9lives", "F_9LIVES"),
        ("", "F_"),
    ],
)
def test_journal_field_examples(key: str, field: str) -> None:
    """Keys become upper case [A-Z0-9_] names that cannot pose as trusted `_` fields."""
    assert systemd.journal_field(key) == field


@given(st.text())
def test_journal_field_is_always_valid(key: str) -> None:
    """Whatever the key, journald accepts the name (journal_field_valid in systemd)."""
    name = systemd.journal_field(key)
    assert 0 < len(name) <= systemd.JOURNAL_FIELD_MAX
    assert name[0] not in "_0123456789"
    assert set(name) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


# journal sender


def test_journal_sender_sends_fields_in_native_format(sock_dir: Path) -> None:
    """Single-line values go as KEY=value, multi-line ones in the binary form, in one datagram."""
    traceback = "Traceback (most recent call last):\n  File 'x'\nZeroDivisionError: boom\n"
    with dgram_server(sock_dir / "journal") as server:
        sender = systemd.JournalSender(str(sock_dir / "journal"))
        sender.send([("MESSAGE", "hello"), ("TRACEBACK", traceback), ("BLOB", b"a=b")])
        data, ancdata, _, _ = server.recvmsg(65536, socket.CMSG_SPACE(4))
        sender.close()
    assert ancdata == []
    assert b"TRACEBACK\n" + struct.pack("<Q", len(traceback)) in data
    assert parse_native(data) == [
        ("MESSAGE", b"hello"),
        ("TRACEBACK", traceback.encode()),
        ("BLOB", b"a=b"),
    ]


def test_journal_sender_passes_a_sealed_memfd_for_a_big_entry(sock_dir: Path) -> None:
    """An entry too large for a datagram arrives as an empty datagram carrying a sealed memfd."""
    big = "x" * BIG_VALUE_BYTES + "\nend"
    with dgram_server(sock_dir / "journal") as server:
        sender = systemd.JournalSender(str(sock_dir / "journal"))
        sender.send([("MESSAGE", "big"), ("BLOB", big)])
        data, ancdata, _, _ = server.recvmsg(65536, socket.CMSG_SPACE(4))
        sender.close()
    assert data == b""
    [(level, kind, raw)] = ancdata
    assert (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS)
    fd = array.array("i", raw)[0]
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        required = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        assert seals & required == required
        content = os.pread(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)
    assert parse_native(content) == [("MESSAGE", b"big"), ("BLOB", big.encode())]


def test_journal_sender_raises_when_journald_is_absent(sock_dir: Path) -> None:
    """An unreachable journal is an OSError the logger can fall back on."""
    sender = systemd.JournalSender(str(sock_dir / "no-journal"))
    with pytest.raises(FileNotFoundError):
        sender.send([("MESSAGE", "lost?")])
    sender.close()
