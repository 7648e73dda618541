"""Test data: interactions to push, recalled items, read-only looks into a daemon's database file, and its
write lock held from outside."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import psycopg
import trio

from forged.models import MemoryItem, Message
from forged.store.records import NewInteraction
from forged.store.sqlite import atomic
from forged.store.sqlite_schema import register_functions
from tests.support import daemons

T = TypeVar("T")


def interaction(
    key: str, text: str | None = None, scope: str = "user:alice", **extra: Any
) -> dict[str, Any]:
    """A small, valid interaction with client id `key`; `extra` adds or replaces fields."""
    return {
        "id": key,
        "scope": scope,
        "session": "chat",
        "messages": [
            {"role": "user", "text": text or f"Turn {key}: shall we keep PostgreSQL here?"},
            {"role": "assistant", "text": f"Yes, PostgreSQL stays for {key}."},
        ],
        **extra,
    }


def recalled(
    n: int, text: str, at: str, *, type: str = "fact", first: int | None = None, **fields: Any
) -> MemoryItem:
    """A recalled item of seq `first` (else `n`) dated `at`; `fields` set any other."""
    seq = n if first is None else first
    item = MemoryItem(
        id=n,
        type=type,  # type: ignore[arg-type]
        kind="interaction" if type == "interaction" else "state",
        scope="s",
        session=None,
        text=text,
        score=1.0,
        created_at=at,
        last_seen_at=at,
        first_seq=seq,
        last_seq=seq,
        first_at=at,
        last_at=at,
    )
    return msgspec.structs.replace(item, **fields)


def connect(database: str | Path, **options: Any) -> sqlite3.Connection:
    """A connection to a SQLite store that may write to it: with the functions its full-text
    indexes call (a bare connection cannot insert or delete an indexed row)."""
    conn = sqlite3.connect(database, **options)
    register_functions(conn)
    return conn


def new(text: str, client_id: str | None = None, scope: str = "s") -> NewInteraction:
    """An interaction as `Store.append` takes it, for tests of the store itself."""
    messages = msgspec.json.encode([Message(role="user", text=text)])
    stamp = "2026-11-29T17:00:00.000Z"
    return NewInteraction(client_id, scope, None, stamp, stamp, 3, messages, None)


def _placeholders(sql: str) -> str:
    """SQLite's `?` placeholders as psycopg's `%s` (and a literal `%` as `%%`)."""
    return sql.replace("%", "%%").replace("?", "%s")


def rows(db: str | Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows of a read-only query against the daemon's database (its PostgreSQL one, if any)."""
    if daemons.STORE_URL:
        with psycopg.connect(daemons.STORE_URL, autocommit=True) as pg:
            return [tuple(r) for r in pg.execute(_placeholders(sql), args).fetchall()]
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


_BTREES = """SELECT c.oid::regclass::text FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
    JOIN pg_am AS a ON a.oid = c.relam
    WHERE a.amname = 'btree' AND c.relnamespace = 'public'::regnamespace"""


def store_files(db: str | Path) -> list[Path]:
    """Every file of a SQLite store on disk: the database, its WAL and shared memory, and each
    file of the turn index's directory beside it (`<db>.index`)."""
    found = sorted(Path(db).parent.glob(Path(db).name + "*"))
    return [f for p in found for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if f.is_file()]


def stored_bytes(db: str | Path) -> bytes:
    """All that the database holds: the file with its WAL, or on PostgreSQL every row as text
    (bytea columns decoded, so a secret in a message is found as it was written)."""
    if not daemons.STORE_URL:
        return b"".join(p.read_bytes() for p in store_files(db))
    tables = rows(
        db,
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
    )
    found = [rows(db, f"SELECT {name}::text FROM {name}") for (name,) in tables]
    texts = [text for table in found for (text,) in table]
    for column in ("messages", "metadata"):
        texts += [bytes(v).decode() for (v,) in rows(db, f"SELECT {column} FROM interactions") if v]
    return "\n".join(texts).encode()


def integrity(db: str | Path) -> str:
    """`PRAGMA integrity_check` of the file: "ok" when SQLite finds nothing wrong.

    On PostgreSQL, amcheck verifies every B-tree index against its table (raising if not).
    """
    if daemons.STORE_URL:
        with psycopg.connect(daemons.STORE_URL, autocommit=True) as pg:
            pg.execute("CREATE EXTENSION IF NOT EXISTS amcheck")
            for (index,) in pg.execute(_BTREES).fetchall():
                pg.execute("SELECT bt_index_check(%s::regclass, true)", (index,))
        return "ok"
    return "; ".join(r for (r,) in rows(db, "PRAGMA integrity_check"))


def facts_per_seq(db: str | Path) -> dict[int, int]:
    """How many facts name each seq: the fake LLM writes one per interaction it distils."""
    counts: dict[int, int] = {}
    for first, last in rows(db, "SELECT first_seq, last_seq FROM facts"):
        if first == last:  # the fake's fact quotes one interaction, its source
            counts[first] = counts.get(first, 0) + 1
    return counts


def summaries_per_seq(db: str | Path) -> dict[int, int]:
    """How many summaries cover each seq."""
    counts: dict[int, int] = {}
    for first, last in rows(db, "SELECT first_seq, last_seq FROM summaries"):
        for seq in range(first, last + 1):
            counts[seq] = counts.get(seq, 0) + 1
    return counts


class Portable:
    """A PostgreSQL connection that runs the tests' SQLite statements: `?` placeholders, and an
    insert's `lastrowid`."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self.lastrowid: int | None = None

    def execute(self, sql: str, args: Any = ()) -> Portable:
        sql = _placeholders(sql)
        if sql.lstrip().upper().startswith("INSERT INTO") and "RETURNING" not in sql.upper():
            row = self._conn.execute(sql + " RETURNING *", args).fetchone()
            self.lastrowid = None if row is None else int(row[0])
            self._rows: list[Any] = []
        else:
            cursor = self._conn.execute(sql, args)
            self._rows = cursor.fetchall() if cursor.description else []
        return self

    def executemany(self, sql: str, args: Any) -> None:
        for row in args:
            self.execute(sql, row)

    def fetchall(self) -> list[Any]:
        return self._rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None


async def write_rows(db: str, write: Callable[[sqlite3.Connection], T]) -> T:
    """Write rows as another process would: its own connection, one transaction."""

    def run() -> T:
        if daemons.STORE_URL:
            with psycopg.connect(daemons.STORE_URL) as pg, pg.transaction():
                return write(Portable(pg))  # type: ignore[arg-type]  # the calls tests make
        conn = connect(db, isolation_level=None)
        try:
            with atomic(conn):
                return write(conn)
        finally:
            conn.close()

    return await trio.to_thread.run_sync(run)


@contextmanager
def write_locked(path: str) -> Iterator[None]:
    """Another connection holds SQLite's write lock: a commit started meanwhile waits for it."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()
