"""Tests for forged.daemon.log: JSON lines, journal fields on a real socket, and a real journald."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from forged.daemon import log
from tests.daemon.test_systemd import TIMEOUT, dgram_server, parse_native
from tests.support.journald_ns import namespaces_unavailable

REPO = Path(__file__).resolve().parents[2]
BIG_VALUE_CHARS = 300_000  # forces the memfd path through journald too
DISTILL_FIELDS = {
    "observer": "distill",
    "batch_id": "b-7",
    "watermark": 42,
    "interactions": 3,
    "llm_ms": 812,
}


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    """Every test configures logging its own way; put structlog's defaults back afterwards."""
    yield
    log.reopen()
    structlog.reset_defaults()


@pytest.fixture
def journal(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A real datagram socket standing where journald's would be, logging configured to it."""
    with tempfile.TemporaryDirectory(prefix="forged-") as path:
        address = Path(path) / "journal"
        with dgram_server(address) as server:
            log.configure("journal", "debug", journal_socket=str(address))
            yield server


def _fail() -> None:
    raise ZeroDivisionError("boom")


def _entry(server: socket.socket) -> dict[str, str]:
    fields = parse_native(server.recv(1 << 20))
    assert len({key for key, _ in fields}) == len(fields), "a field appears twice"
    return {key: value.decode() for key, value in fields}


# JSON lines


def test_json_lines_shape(capsys: pytest.CaptureFixture[str]) -> None:
    """One JSON object per line with event, level, UTC timestamp and the event's keys."""
    log.configure("json")
    structlog.get_logger().info("batch_committed", **DISTILL_FIELDS)
    [line] = capsys.readouterr().err.splitlines()
    entry = json.loads(line)
    assert entry.pop("timestamp").endswith("Z")
    assert entry == {"event": "batch_committed", "level": "info", **DISTILL_FIELDS}


def test_json_exception_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A traceback stays inside its event's line, under `exception`."""
    log.configure("json")
    try:
        _fail()
    except ZeroDivisionError:
        structlog.get_logger().exception("llm_unavailable", observer="distill")
    [line] = capsys.readouterr().err.splitlines()
    entry = json.loads(line)
    assert entry["level"] == "error"
    assert entry["exception"].startswith("Traceback (most recent call last):")
    assert entry["exception"].endswith("ZeroDivisionError: boom")


def test_level_filters_below_threshold(capsys: pytest.CaptureFixture[str]) -> None:
    """Events under the configured level are dropped."""
    log.configure("json", "warning")
    logger = structlog.get_logger()
    logger.info("quiet")
    logger.warning("loud")
    assert [json.loads(line)["event"] for line in capsys.readouterr().err.splitlines()] == ["loud"]


def test_auto_is_json_when_stderr_is_a_pipe(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a terminal and not the journal stream: JSON lines."""
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    log.configure("auto")
    structlog.get_logger().info("started")
    assert json.loads(capsys.readouterr().err)["event"] == "started"


def test_auto_is_journal_on_the_journal_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """When $JOURNAL_STREAM is stderr, entries go to the journal socket."""
    stat = os.fstat(2)
    monkeypatch.setenv("JOURNAL_STREAM", f"{stat.st_dev}:{stat.st_ino}")
    with tempfile.TemporaryDirectory(prefix="forged-") as path:
        address = Path(path) / "journal"
        with dgram_server(address) as server:
            log.configure("auto", journal_socket=str(address))
            structlog.get_logger().info("started")
            assert _entry(server)["MESSAGE"] == "started"


@pytest.mark.parametrize(
    ("fmt", "level", "message"),
    [
        ("xml", "info", r"^log format must be one of auto, console, json, journal, got 'xml'$"),
        (
            "json",
            "loud",
            r"^log level must be one of debug, info, warning, error, critical, got 'loud'$",
        ),
    ],
)
def test_configure_rejects_unknown_values(fmt: str, level: str, message: str) -> None:
    """A typo in [log] is reported with the accepted values."""
    with pytest.raises(ValueError, match=message):
        log.configure(fmt, level)


# journal fields on a real datagram socket


def test_journal_entry_fields(journal: socket.socket) -> None:
    """MESSAGE, PRIORITY, identifier, code location and every key as its own upper-case field."""
    structlog.get_logger().warning("batch_committed", **DISTILL_FIELDS, note="two words")
    entry = _entry(journal)
    assert entry.pop("CODE_FILE") == __file__
    assert int(entry.pop("CODE_LINE")) > 0
    assert entry == {
        "MESSAGE": "batch_committed observer=distill batch_id=b-7 watermark=42 interactions=3"
        ' llm_ms=812 note="two words"',
        "PRIORITY": "4",
        "SYSLOG_IDENTIFIER": "forged",
        "CODE_FUNC": "test_journal_entry_fields",
        "OBSERVER": "distill",
        "BATCH_ID": "b-7",
        "WATERMARK": "42",
        "INTERACTIONS": "3",
        "LLM_MS": "812",
        "NOTE": "two words",
    }


@pytest.mark.parametrize(
    ("method", "priority"),
    [("debug", "7"), ("info", "6"), ("warning", "4"), ("error", "3"), ("critical", "2")],
)
def test_journal_priority_follows_level(journal: socket.socket, method: str, priority: str) -> None:
    """Levels map to syslog priorities so `journalctl -p` filters work."""
    getattr(structlog.get_logger(), method)("event")
    assert _entry(journal)["PRIORITY"] == priority


def test_journal_exception_is_one_entry(journal: socket.socket) -> None:
    """The traceback is a multi-line TRACEBACK field and the end of MESSAGE, in one datagram."""
    try:
        _fail()
    except ZeroDivisionError:
        structlog.get_logger().exception("llm_unavailable", observer="distill")
    entry = _entry(journal)
    journal.setblocking(False)
    with pytest.raises(BlockingIOError):
        journal.recv(1)  # nothing more was sent
    assert entry["PRIORITY"] == "3"
    assert entry["TRACEBACK"].startswith("Traceback (most recent call last):\n")
    assert entry["TRACEBACK"].endswith("ZeroDivisionError: boom")
    assert entry["MESSAGE"] == "llm_unavailable observer=distill\n" + entry["TRACEBACK"]


def test_journal_keys_cannot_shadow_own_fields(journal: socket.socket) -> None:
    """`message=` and `_pid=` keys cannot fake MESSAGE or a trusted `_PID` field."""
    structlog.get_logger().info("odd_keys", message="hi", _pid=1, **{"llm-ms": 5})
    entry = _entry(journal)
    assert entry["MESSAGE"] == "odd_keys message=hi _pid=1 llm-ms=5"
    assert (entry["FIELD_MESSAGE"], entry["PID"], entry["LLM_MS"]) == ("hi", "1", "5")


def test_journal_values_cannot_carry_control_or_bidi_characters(journal: socket.socket) -> None:
    """ESC, NUL, newlines and bidi overrides reach MESSAGE and fields escaped, never raw."""
    hostile = "evil\x1b[2J\x00\u202egnp.exe\nforged: ready"
    try:
        raise ValueError("bad \x1b[31mred\u202e")
    except ValueError:
        structlog.get_logger().exception("client_refused", scope=hostile, **{"k\x1b": 1})
    entry = _entry(journal)
    escaped = "evil\\x1b[2J\\x00\\u202egnp.exe\\nforged: ready"
    assert entry["SCOPE"] == escaped
    assert entry["K_"] == "1"
    assert entry["MESSAGE"].startswith(f"client_refused scope={json.dumps(escaped)} k\\x1b=1\n")
    assert entry["TRACEBACK"].endswith("ValueError: bad \\x1b[31mred\\u202e")
    assert "\n  File " in entry["TRACEBACK"]  # the traceback keeps its lines
    unsafe = {"\x1b", "\x00", "\u202e"}
    assert [(k, v) for k, v in entry.items() if unsafe & set(v)] == []


def test_journal_unreachable_falls_back_to_json(capsys: pytest.CaptureFixture[str]) -> None:
    """With no journald listening, the entry is written to stderr as a JSON line."""
    with tempfile.TemporaryDirectory(prefix="forged-") as path:
        log.configure("journal", journal_socket=str(Path(path) / "absent"))
        structlog.get_logger().info("batch_committed", **DISTILL_FIELDS)
    entry = json.loads(capsys.readouterr().err)
    assert entry["event"] == "batch_committed"
    assert entry["observer"] == "distill"


def test_reopen_keeps_logging(journal: socket.socket) -> None:
    """After reopen() (SIGHUP) the next entry still arrives."""
    log.reopen()
    structlog.get_logger().info("after_hup")
    assert _entry(journal)["MESSAGE"] == "after_hup"


# a real journald in a private mount namespace

_JOURNALD_CHILD = textwrap.dedent(
    f"""
    import structlog
    from forged.daemon import log

    log.configure("journal", "debug")
    logger = structlog.get_logger()
    logger.info("batch_committed", **{DISTILL_FIELDS!r})
    try:
        1 / 0
    except ZeroDivisionError:
        logger.exception("llm_unavailable", observer="distill")
    logger.info("big_entry", blob="x" * {BIG_VALUE_CHARS})
    """
)


def _journald_entries() -> list[dict[str, Any]]:
    helper = REPO / "tests" / "support" / "journald_ns.py"
    command = ["unshare", "--mount", "--propagation", "private", sys.executable, str(helper)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [*command, sys.executable, "-c", _JOURNALD_CHILD],
        env=env,
        capture_output=True,
        check=False,
        timeout=TIMEOUT * 3,
    )
    assert done.returncode == 0, done.stderr.decode()
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.integration
def test_real_journald_stores_structured_entries() -> None:
    """journald keeps every field, the traceback as one entry, and a 300 kB entry via memfd."""
    if reason := namespaces_unavailable():
        pytest.skip(reason)
    committed, failed, big = _journald_entries()  # exactly three entries, nothing split off
    assert committed["SYSLOG_IDENTIFIER"] == "forged"
    assert committed["PRIORITY"] == "6"
    assert committed["CODE_FILE"] == "<string>"
    assert committed["MESSAGE"].startswith("batch_committed observer=distill batch_id=b-7")
    fields = {
        key: committed[key]
        for key in ("OBSERVER", "BATCH_ID", "WATERMARK", "INTERACTIONS", "LLM_MS")
    }
    assert fields == {
        "OBSERVER": "distill",
        "BATCH_ID": "b-7",
        "WATERMARK": "42",
        "INTERACTIONS": "3",
        "LLM_MS": "812",
    }
    assert failed["PRIORITY"] == "3"
    assert failed["TRACEBACK"].startswith("Traceback (most recent call last):\n")
    assert failed["TRACEBACK"].endswith("ZeroDivisionError: division by zero")
    assert failed["MESSAGE"] == "llm_unavailable observer=distill\n" + failed["TRACEBACK"]
    assert big["BLOB"] == "x" * BIG_VALUE_CHARS


def test_console_renders_event_and_keys(capsys: pytest.CaptureFixture[str]) -> None:
    """The terminal format shows the event name and its key=value pairs on one line."""
    log.configure("console")
    structlog.get_logger().info("batch_committed", observer="distill")
    [line] = capsys.readouterr().err.splitlines()
    assert "batch_committed" in line
    assert "observer" in line
    assert "distill" in line
