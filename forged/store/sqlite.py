"""The SQLite store: the interaction log, distilled results and watermarks, one writer at a time.

What it shares with the PostgreSQL store lives in forged.store.common; here are SQLite's connections,
its transactions, its log and what forgetting leaves to clean in the file.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import structlog
import trio

from forged.errors import StorageFull, StoreError
from forged.models import StoredInteraction
from forged.store.backup import DatabaseLock
from forged.store.common import SqlStore, new_rows, read_log
from forged.store.readers import Readers, ReadWaits, asking, within
from forged.store.records import NewInteraction
from forged.store.sqlite_schema import FILL_BLOCKS, migrate, register_functions

__all__ = ["CHECKPOINT_ATTEMPTS", "Store", "atomic", "file_schema_version"]

T = TypeVar("T")

_IDS = msgspec.json.Encoder()
_INSERT_INTERACTION = """
    INSERT INTO interactions
        (client_id, scope, session, timestamp, received_at, tokens, messages, metadata)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""  # duplicates are left out beforehand (not ON CONFLICT): a duplicate must not use up a seq
_STORED_IDS = """
    SELECT i.scope, i.client_id FROM json_each(?) AS k JOIN interactions AS i
        ON i.scope = json_extract(k.value, '$[0]') AND i.client_id = json_extract(k.value, '$[1]')
"""  # one query for a whole group, through the (scope, client_id) index
CHECKPOINT_ATTEMPTS = 3  # TRUNCATE checkpoints tried while readers hold old snapshots
READERS = 4  # reader connections: one a scope, three scopes busy leave one (docs/recall.md)


log = structlog.get_logger(__name__)


def _greatest(*values: Any) -> Any:
    """PostgreSQL's `greatest`: the largest value that is not NULL."""
    return max((v for v in values if v is not None), default=None)


def _least(*values: Any) -> Any:
    """PostgreSQL's `least`: the smallest value that is not NULL."""
    return min((v for v in values if v is not None), default=None)


def _connect(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")  # 202 means durable, even across power loss
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA secure_delete = ON")  # forgotten text must leave the file
    try:
        conn.execute("SELECT pow(2, 1)")  # recall's recency decay
    except sqlite3.OperationalError:  # a SQLite built without its math functions
        conn.create_function("pow", 2, math.pow, deterministic=True)
    # the portable SQL's names for the scalar max and min (forged.store.portable)
    conn.create_function("greatest", -1, _greatest, deterministic=True)
    conn.create_function("least", -1, _least, deterministic=True)
    register_functions(conn)  # what the full-text indexes' views and triggers call
    return conn


def _translate(exc: sqlite3.Error) -> StoreError:
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return StorageFull("the disk holding the database is full")
    return StoreError(f"SQLite: {exc}")


@contextmanager
def atomic(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """Run the block in one write transaction, rolled back whole on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:  # SQLite may already have rolled back (disk full)
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _stored_ids(conn: sqlite3.Connection, keys: list[tuple[str, str]]) -> Iterable[tuple[str, str]]:
    return conn.execute(_STORED_IDS, (_IDS.encode(keys),))


def _append(
    conn: sqlite3.Connection, requests: list[list[NewInteraction]]
) -> tuple[list[int], int]:
    """Insert the requests in one transaction; return what each added, and the last seq."""
    with atomic(conn):
        rows, accepted = new_rows(requests, lambda ids: _stored_ids(conn, ids))
        conn.executemany(_INSERT_INTERACTION, rows)
        (last_seq,) = conn.execute("SELECT coalesce(max(seq), 0) FROM interactions").fetchone()
    return accepted, last_seq


def _fts_tables(conn: sqlite3.Connection) -> list[str]:
    """Every full-text index in the schema."""
    sql = "SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE % USING fts5%'"
    return [name for (name,) in conn.execute(sql)]


def _checkpoint(conn: sqlite3.Connection) -> bool:
    """Copy the WAL into the database and truncate it, so old page images leave the disk."""
    for _ in range(CHECKPOINT_ATTEMPTS):
        (busy, _, _) = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if not busy:
            return True
    return False


def file_schema_version(path: str) -> int:
    """The schema version of the database file at `path`, read only (0 before the first start)."""
    if not Path(path).exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            sql = "SELECT coalesce(max(version), 0) FROM schema_migrations"
            return int(conn.execute(sql).fetchone()[0])
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return 0
        raise StoreError(f"cannot read the database at {path}: {exc}") from exc


def _size_on_disk(path: str) -> int:
    """Bytes of the database file and its companions (-wal, -shm) that exist."""
    files = (Path(path + suffix) for suffix in ("", "-wal", "-shm"))
    return sum(f.stat().st_size for f in files if f.exists())


# The log's last seq is the last one given, as when it was running: its AUTOINCREMENT mark,
# not the largest left (with the newest turns deleted, the turn index looked ahead of the log
# after a restart and was rebuilt whole).
_TOTALS = """
    SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'interactions'), 0), count(*)
    FROM interactions
"""


class Store(SqlStore):
    """The database, opened once: a writer connection behind a `CapacityLimiter(1)`, a few
    readers shared by scope (forged.store.readers), and the observers' own connection to the log.

    Every blocking call runs in a worker thread; the limiters make sure each connection is used
    by one thread at a time.
    """

    backend = "sqlite"
    poll_interval = math.inf  # every append goes through this daemon, which wakes the feeders

    def __init__(self, path: str, busy_timeout_ms: int = 5000, readers: int = READERS) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # memory is private: SQLite gives the -wal and -shm files the mode of the database file
        Path(path).touch(mode=0o600, exist_ok=True)
        self._claim = DatabaseLock(path)  # no restore replaces the file while it is open here
        try:
            self._writer = _connect(path, busy_timeout_ms)
            self.schema_version = migrate(self._writer)
            self._reader = _connect(path, busy_timeout_ms)  # the log's: feeding waits for no search
            self._readers = Readers([_connect(path, busy_timeout_ms) for _ in range(readers)])
            self.last_seq, self.count = self._writer.execute(_TOTALS).fetchone()
        except sqlite3.Error as exc:
            self._claim.release()
            raise _translate(exc) from exc
        self.path = path
        self._write_limiter = trio.CapacityLimiter(1)
        self._read_limiter = trio.CapacityLimiter(1)

    @asynccontextmanager
    async def lease(self, observer: str, follow: Callable[[int], None]) -> AsyncIterator[None]:
        """The right to run `observer`: always this daemon's, the only one with the file open."""
        yield

    def close(self) -> None:
        for conn in self._readers.connections():
            conn.close()
        self._reader.close()
        self._writer.close()
        self._claim.release()

    async def size_bytes(self) -> int:
        return await trio.to_thread.run_sync(_size_on_disk, self.path)

    def read_waits(self) -> ReadWaits:
        return self._readers.waits

    def _transaction(self, conn: sqlite3.Connection) -> Any:
        return atomic(conn)

    def _forgotten(self, conn: sqlite3.Connection, scope: str) -> None:
        """Merge each full-text index's segments, so no deleted term stays in an old one, and
        take each block's latest time again from the turns left (none of a forgotten one
        stays behind), then checkpoint: with `secure_delete` on, freed space was overwritten
        with zeros, and the checkpoint moves the zeroed pages into the database file and
        empties the WAL."""
        with atomic(conn):
            for fts in _fts_tables(conn):
                conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('optimize')")
            conn.execute("DELETE FROM interaction_blocks")
            conn.execute(FILL_BLOCKS)
        if not _checkpoint(conn):
            log.warning("forget_checkpoint_busy", scope=scope)

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(writer_connection, *args)` in a thread, one writer at a time.

        Only the named write methods call it, each with a function that writes inside
        `atomic()`: every write is a transaction the store owns.
        """
        return await trio.to_thread.run_sync(
            self._call, fn, self._writer, args, limiter=self._write_limiter
        )

    async def read(
        self,
        fn: Callable[..., T],
        *args: Any,
        scope: str | None = None,
        budget: float | None = None,
    ) -> T:
        """Run `fn(reader_connection, *args)` in a thread, on a reader free for `scope` and the
        client asking, stopped with QueryTimeout after `budget` seconds."""
        return await self._readers.run(
            lambda conn: self._call(fn, conn, args, budget), scope, asking()
        )

    @staticmethod
    def _call(
        fn: Callable[..., T],
        conn: sqlite3.Connection,
        args: tuple[Any, ...],
        budget: float | None = None,
    ) -> T:
        try:
            return within(conn, budget, fn, *args)
        except sqlite3.Error as exc:
            raise _translate(exc) from exc

    async def append(self, requests: list[list[NewInteraction]]) -> list[int]:
        """Commit the interactions of several requests together; return what each added."""
        accepted, self.last_seq = await self._write(_append, requests)
        self.count += sum(accepted)
        return accepted

    async def refresh_totals(self) -> dict[str, int]:
        """Nothing to refresh: this daemon alone has the file open, and counts every append."""
        return {}

    async def read_log(self, after: int, limit: int) -> list[StoredInteraction]:
        """Up to `limit` interactions with seq greater than `after`, in seq order, decoded in
        the reader's thread (a chunk of the log may hold many megabytes)."""
        return await trio.to_thread.run_sync(
            self._call,
            lambda c: read_log(c, after, limit),
            self._reader,
            (),
            limiter=self._read_limiter,
        )
