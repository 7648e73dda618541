"""Schema migrations: applied in order once, each recorded; inconsistent or newer databases refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from forged.errors import StoreError
from forged.store.sqlite import Store
from forged.store.sqlite_schema import MIGRATIONS, migrate
from tests.support.data import connect


def _connect(path: Path) -> sqlite3.Connection:
    return connect(path, isolation_level=None)  # with the functions the indexes call


def test_a_new_database_gets_every_migration_recorded(tmp_path: Path) -> None:
    """A fresh file ends at the latest version, with one row per migration, in order."""
    conn = _connect(tmp_path / "f.db")
    assert migrate(conn) == len(MIGRATIONS)
    rows = conn.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    assert rows == [(v, name) for v, (name, _sql) in enumerate(MIGRATIONS, start=1)]


def test_migrating_again_changes_nothing(tmp_path: Path) -> None:
    """A second run applies nothing and leaves the recorded versions as they were."""
    conn = _connect(tmp_path / "f.db")
    migrate(conn)
    before = conn.execute("SELECT * FROM schema_migrations").fetchall()
    assert migrate(conn) == len(MIGRATIONS)
    assert conn.execute("SELECT * FROM schema_migrations").fetchall() == before


def test_a_database_from_a_newer_forged_is_refused(tmp_path: Path) -> None:
    """A version past the last migration this code knows is an error naming both versions."""
    conn = _connect(tmp_path / "f.db")
    migrate(conn)
    newer = len(MIGRATIONS) + 1
    conn.execute(f"INSERT INTO schema_migrations VALUES ({newer}, 'future', 'then')")
    with pytest.raises(StoreError, match=rf"^the database is at schema version {newer}, newer"):
        migrate(conn)


def test_a_gap_in_the_recorded_versions_is_refused(tmp_path: Path) -> None:
    """Versions 1 and 3 without 2 mean the table was tampered with: nothing is applied."""
    conn = _connect(tmp_path / "f.db")
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT, applied_at TEXT)"
    )
    conn.execute("INSERT INTO schema_migrations VALUES (1, 'a', 'x'), (3, 'c', 'x')")
    with pytest.raises(StoreError, match=r"^schema_migrations is inconsistent: versions \[1, 3\]$"):
        migrate(conn)


def test_a_failing_migration_leaves_no_part_of_itself(tmp_path: Path) -> None:
    """A migration that fails midway is rolled back whole: its version is not recorded."""
    conn = _connect(tmp_path / "f.db")
    conn.execute("CREATE TABLE interactions (taken INTEGER)")  # the first migration creates it
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn)
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone() == (0,)


async def test_version_9_gives_each_dead_letter_its_interactions_scope(tmp_path: Path) -> None:
    """Dead letters stored before version 9 take their interaction's scope, so forgetting the
    scope erases them with it."""
    conn = _connect(tmp_path / "f.db")
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
        " applied_at TEXT NOT NULL)"
    )
    for version, (name, sql) in enumerate(MIGRATIONS[:8], start=1):
        conn.executescript(sql)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 'x')", (version, name))
    for seq, scope in ((1, "a"), (2, "b")):
        conn.execute(
            "INSERT INTO interactions (seq, scope, timestamp, received_at, tokens,"
            " messages) VALUES (?, ?, 't', 't', 1, '[]')",
            (seq, scope),
        )
        conn.execute(
            "INSERT INTO dead_letters (observer, seq, reason, created_at)"
            " VALUES ('distill', ?, 'bad', 't')",
            (seq,),
        )
    conn.close()
    store = Store(str(tmp_path / "f.db"))
    try:
        sql = "SELECT seq, scope FROM dead_letters ORDER BY seq"
        assert await store.read(lambda c: c.execute(sql).fetchall()) == [(1, "a"), (2, "b")]
        await store.forget("a")
        assert await store.read(lambda c: c.execute(sql).fetchall()) == [(2, "b")]
    finally:
        store.close()


def _at_version(path: Path, version: int) -> sqlite3.Connection:
    conn = _connect(path)
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
        " applied_at TEXT NOT NULL)"
    )
    for number, (name, sql) in enumerate(MIGRATIONS[:version], start=1):
        conn.executescript(sql)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 'x')", (number, name))
    return conn


def test_client_ids_become_unique_per_scope_keeping_seqs_and_the_index(tmp_path: Path) -> None:
    """The (scope, id) migration keeps every row, its seq, the next seq and the search index,
    and then lets another scope store an id one scope already has, never the same scope."""
    conn = _at_version(tmp_path / "f.db", len(MIGRATIONS) - 1)
    insert = (
        "INSERT INTO interactions (seq, client_id, scope, timestamp, received_at, tokens,"
        " messages) VALUES (?, ?, ?, 't', 't', 1, ?)"
    )
    for seq, scope in ((1, "a"), (2, "b"), (5, "a")):
        conn.execute(insert, (seq, f"id-{seq}", scope, f'[{{"role":"user","text":"word{seq}"}}]'))
    conn.execute("DELETE FROM interactions WHERE seq = 5")  # forgotten: 5 is never reused
    assert migrate(conn) == len(MIGRATIONS)
    rows = conn.execute("SELECT seq, client_id, scope FROM interactions ORDER BY seq").fetchall()
    assert rows == [(1, "id-1", "a"), (2, "id-2", "b")]
    match = "SELECT rowid FROM interactions_fts WHERE interactions_fts MATCH 'word2'"
    assert conn.execute(match).fetchall() == [(2,)]
    conn.execute(insert, (None, "id-1", "b", '[{"role":"user","text":"again"}]'))
    last = "SELECT seq, client_id, scope FROM interactions ORDER BY seq DESC LIMIT 1"
    assert conn.execute(last).fetchone() == (6, "id-1", "b")
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute(insert, (None, "id-1", "a", '[{"role":"user","text":"x"}]'))
