"""The audit trail observer: every interaction once, in order, synced, rotated by size, 0600."""

from __future__ import annotations

import stat
from functools import partial
from pathlib import Path

import msgspec
import pytest
import trio

from forged.config import Config, load_config, parse_config
from forged.daemon.loader import check_observers, load_observers
from forged.errors import ConfigError
from forged.models import Message, StoredInteraction
from forged.observers.audit import AuditConfig, AuditFile
from forged.store.sqlite import Store
from tests.support.daemons import running_daemon, socket_client, write_config
from tests.support.data import write_rows
from tests.support.fakellm import FakeLLM

AUDIT = "forged.observers.audit:AuditLog"


def _line(seq: int, text: str = "x" * 900) -> bytes:
    item = StoredInteraction(seq, "s", None, "2026-11-30T00:00:00Z", 1, [Message("user", text)])
    return msgspec.json.encode(item) + b"\n"


def _seqs(*paths: Path) -> list[int]:
    return [msgspec.json.decode(line)["seq"] for p in paths for line in p.read_bytes().splitlines()]


def test_the_trail_rotates_by_size_and_keeps_the_newest(tmp_path: Path) -> None:
    """Past max_bytes the file moves to .1, .1 to .2; beyond `keep` the oldest goes; all 0600."""
    path = tmp_path / "audit" / "trail.jsonl"
    trail = AuditFile(AuditConfig(path=str(path), max_bytes=4096, keep=2))
    assert trail.open() == 0
    for seq in range(1, 21):
        trail.append([_line(seq)])
    trail.close()
    rotated = [path.with_name(f"trail.jsonl.{n}") for n in (2, 1)]
    assert not path.with_name("trail.jsonl.3").exists()
    assert _seqs(*rotated, path) == list(range(9, 21))  # 4 lines a file; the oldest dropped
    for p in (*rotated, path):
        assert p.stat().st_size <= 4096
        assert stat.S_IMODE(p.stat().st_mode) == 0o600


def test_a_torn_last_line_is_cut_and_the_last_seq_found(tmp_path: Path) -> None:
    """A crash mid-write leaves half a line: reopening removes it and reports the last whole one."""
    path = tmp_path / "trail.jsonl"
    path.write_bytes(_line(1) + _line(2) + _line(3)[:50])
    path.chmod(0o644)
    trail = AuditFile(AuditConfig(path=str(path)))
    assert trail.open() == 2
    trail.append([_line(3)])
    trail.close()
    assert _seqs(path) == [1, 2, 3]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_empty_file_after_rotation_looks_back_at_the_rotated_one(tmp_path: Path) -> None:
    """Stopped right after a rotation, the trail still knows its last seq."""
    path = tmp_path / "trail.jsonl"
    path.with_name("trail.jsonl.1").write_bytes(_line(6) + _line(7))
    path.touch()
    assert AuditFile(AuditConfig(path=str(path))).open() == 7


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("", "observers.audit: object missing required field `path`"),
        ("path = 'a'\nmax_bytes = 10", "observers.audit.max_bytes: expected `int` >= 4096"),
        ("path = 'a'\nrotate = 3", "observers.audit.rotate: unknown key"),
    ],
)
def test_bad_audit_settings_name_the_key(table: str, message: str) -> None:
    """The audit table is checked like forged's own config."""
    with pytest.raises(ConfigError) as info:
        check_observers(parse_config(f"[observers.audit]\nclass = '{AUDIT}'\n{table}"))
    assert str(info.value) == message


def test_an_unwritable_path_stops_forged_at_start(tmp_path: Path) -> None:
    """The trail's file is opened at start: a bad path is one config line, not a restart loop."""
    (tmp_path / "file").touch()
    path = tmp_path / "file" / "audit.jsonl"
    config = parse_config(f"[observers.audit]\nclass = '{AUDIT}'\npath = '{path}'")
    store = Store(str(tmp_path / "forged.db"))
    with pytest.raises(ConfigError) as info:
        load_observers(config, store)
    store.close()
    assert str(info.value) == (
        f"observers.audit: {AUDIT} failed to start:"
        f" FileExistsError: [Errno 17] File exists: '{tmp_path / 'file'}'"
    )


async def _push_and_drain(config: Config, turns: list[dict[str, object]]) -> None:
    async with running_daemon(config) as api, socket_client(config.server.socket) as client:
        async with trio.open_nursery() as nursery:
            for turn in turns:  # concurrent clients: acceptance order is what the trail keeps
                nursery.start_soon(partial(client.post, "/v1/interactions", json=turn))
        while api.hub.backlog():
            await api.hub.changed()


async def test_every_interaction_is_audited_once_across_a_lost_commit(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Seqs 1..n once each, scrubbed, even when a restart redelivers lines already written."""
    trail = short_tmp / "audit.jsonl"
    config = load_config(
        write_config(
            short_tmp,
            fake_llm.base_url,
            distill={"enabled": False},
            observers={"audit": {"class": AUDIT, "path": str(trail)}},
        ),
        {},
    )
    secret = "my key is AKIAIOSFODNN7EXAMPLE"
    turns = [{"messages": [{"role": "user", "text": f"turn {i}: {secret}"}]} for i in range(6)]
    with trio.fail_after(30):
        await _push_and_drain(config, turns)
        await write_rows(  # a crash after the sync, before the commit
            str(short_tmp / "forged.db"),
            lambda db: db.execute("UPDATE watermarks SET seq = 2 WHERE observer = 'audit'"),
        )
        await _push_and_drain(config, turns[:3])
    assert _seqs(trail) == list(range(1, 10))
    assert "AKIAIOSFODNN7EXAMPLE" not in trail.read_text()
    assert stat.S_IMODE(trail.stat().st_mode) == 0o600
