"""The SQLite store: migrations, durable appends, atomic batch commits, round-trips."""

from __future__ import annotations

import os
import sqlite3
import stat
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forged.errors import StoreError
from forged.models import (
    BatchOutcome,
    DeadLetter,
    Deleted,
    DistillRun,
    Fact,
    ScopeResult,
    Usage,
    normalise,
)
from forged.schema import MIGRATIONS
from forged.store import Store
from tests.data import new


def test_migrations_are_recorded_once(tmp_path: Path) -> None:
    """Opening twice applies each migration once and records it."""
    Store(str(tmp_path / "f.db")).close()
    store = Store(str(tmp_path / "f.db"))
    store.close()
    with sqlite3.connect(tmp_path / "f.db") as conn:
        versions = conn.execute("SELECT version FROM schema_migrations").fetchall()
    assert versions == [(v,) for v in range(1, len(MIGRATIONS) + 1)]


async def test_database_files_are_private_under_a_lax_umask(tmp_path: Path) -> None:
    """With umask 022 (outside systemd) the database, WAL and shm are created 0600."""
    old = os.umask(0o022)
    try:
        store = Store(str(tmp_path / "f.db"))
    finally:
        os.umask(old)
    try:
        await store.append([[new("private memory")]])
        modes = {
            name: stat.S_IMODE(os.stat(tmp_path / name).st_mode)
            for name in ("f.db", "f.db-wal", "f.db-shm")
        }
    finally:
        store.close()
    assert modes == {"f.db": 0o600, "f.db-wal": 0o600, "f.db-shm": 0o600}


def test_pragmas_are_durable(tmp_path: Path) -> None:
    """WAL and synchronous=FULL: a 202 survives power loss."""
    store = Store(str(tmp_path / "f.db"))
    mode = store._writer.execute("PRAGMA journal_mode").fetchone()
    sync = store._writer.execute("PRAGMA synchronous").fetchone()
    store.close()
    assert (mode, sync) == (("wal",), (2,))


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    """A database written by a newer forged is not opened by an older one."""
    Store(str(tmp_path / "f.db")).close()
    with sqlite3.connect(tmp_path / "f.db") as conn:
        conn.execute(
            "INSERT INTO schema_migrations VALUES (?, 'future', 'x')", (len(MIGRATIONS) + 1,)
        )
    with pytest.raises(StoreError, match=r"newer than this forged knows"):
        Store(str(tmp_path / "f.db"))


async def test_duplicate_ids_take_no_seq(tmp_path: Path) -> None:
    """Seqs stay dense: a duplicate id is counted, not numbered."""
    store = Store(str(tmp_path / "f.db"))
    assert await store.append([[new("a", "x")], [new("b", "x"), new("c", "y")]]) == [1, 1]
    assert (store.last_seq, store.count) == (2, 2)
    assert [i.seq for i in await store.read_log(0, 10)] == [1, 2]
    store.close()


async def test_failed_batch_commit_leaves_nothing(tmp_path: Path) -> None:
    """Results and watermark move together: a failing commit writes neither."""
    store = Store(str(tmp_path / "f.db"))
    await store.append([[new("a")]])
    bad = Fact(kind="opinion", text="not a kind the schema allows")  # type: ignore[arg-type]
    result = ScopeResult("b1", "s", None, "sum", [bad], 1, 1)
    with pytest.raises(StoreError):
        await store.commit_batch("distill", BatchOutcome([result], [], [], watermark=1))
    totals = await store.observer_totals("distill")
    assert totals.watermark == 0
    assert store._reader.execute("SELECT count(*) FROM summaries").fetchone() == (0,)
    store.close()


async def test_same_fact_from_two_batches_is_merged(tmp_path: Path) -> None:
    """A fact with the same scope, kind and normalised text is counted, not stored twice."""
    store = Store(str(tmp_path / "f.db"))
    await store.append([[new("a"), new("b")]])
    for seq, text in ((1, "Alice prefers tea."), (2, "alice PREFERS tea")):
        fact = Fact(kind="preference", text=text)
        result = ScopeResult(f"b{seq}", "s", None, "sum", [fact], seq, seq)
        await store.commit_batch("distill", BatchOutcome([result], [], [], watermark=seq))
    rows = store._reader.execute("SELECT seen_count, first_seq, last_seq FROM facts").fetchall()
    store.close()
    assert rows == [(2, 1, 2)]


def test_normalise_folds_case_space_and_punctuation() -> None:
    """Trivially different spellings compare equal."""
    assert (
        normalise("  Alice   prefers TEA! ")
        == normalise("alice prefers tea")
        == "alice prefers tea"
    )


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # each example opens a database with fsync: its time follows the machine's load
@given(texts=st.lists(st.text(min_size=1).filter(str.strip), min_size=1, max_size=5))
async def test_interactions_round_trip(tmp_path: Path, texts: list[str]) -> None:
    """What is appended is read back unchanged, in order."""
    store = Store(str(tmp_path / f"rt-{uuid.uuid4().hex}.db"))  # a fresh file per example
    await store.append([[new(t) for t in texts]])
    read = await store.read_log(0, 100)
    store.close()
    assert [i.messages[0].text for i in read] == texts


async def test_a_batch_of_a_scope_forgotten_meanwhile_stores_nothing_of_it(tmp_path: Path) -> None:
    """Results, runs and dead letters of forgotten seqs are left out; the rest and the watermark
    are stored, and the answer says what was."""
    store = Store(str(tmp_path / "f.db"))
    await store.append([[new("a", scope="fz"), new("b", scope="kept"), new("c", scope="fz")]])
    forgotten = await store.forget("fz", ["distill"])
    assert (forgotten.deleted, forgotten.through) == (Deleted(2, 0, 0), 3)
    fact = [Fact(kind="state", text="Something was said.")]
    runs = [DistillRun("b1", "m", scope, 1, seq, seq, Usage(calls=1), "committed")
            for scope, seq in (("fz", 1), ("kept", 2))]  # fmt: skip
    outcome = BatchOutcome(
        [
            ScopeResult("b1", "fz", None, "s", fact, 1, 1),
            ScopeResult("b1", "kept", None, "s", fact, 2, 2),
        ],
        [DeadLetter(3, "too long")],
        runs,
        watermark=3,
    )
    stored = await store.commit_batch("distill", outcome)
    rows = {t: store._reader.execute(f"SELECT group_concat(scope) FROM {t}").fetchone()[0]
            for t in ("summaries", "facts", "distill_runs")}  # fmt: skip
    dead = store._reader.execute("SELECT count(*) FROM dead_letters").fetchone()[0]
    totals = await store.observer_totals("distill")
    store.close()
    assert rows == dict.fromkeys(rows, "kept")
    assert (dead, totals.watermark, totals.llm_calls) == (0, 3, 1)
    assert (len(stored.results), len(stored.runs), stored.dead_letters) == (1, 1, [])
