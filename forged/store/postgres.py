"""The PostgreSQL store: one memory shared by many daemons, with the SQLite store's guarantees.

Observer progress across daemons (see docs/architecture.md, "Many daemons, one memory"):

- The log barrier. Every append holds a shared advisory lock on the log until it commits; a
  feeder reads the log only while holding that lock exclusively. So every seq allocated before a
  read is committed (or rolled back) when the read looks, and every seq allocated after it is
  larger than any it sees: a watermark never passes a seq that commits later. Facts and
  summaries have one too (forged.store.cursors), for the embed observer that follows their ids.
- Observer leases. An observer runs in one daemon at a time: the one whose connection holds the
  observer's session advisory lock. A daemon that dies releases it with its session; another
  takes it and starts at the stored watermark, so an unfinished batch is done again, once.
- Fencing. A commit that moves a watermark locks the watermark row and checks, in the same
  transaction, that this daemon still holds the lease; a new holder locks the row once after
  taking the lease, so it waits for a commit its predecessor still had in flight and reads the
  row after it: it sees every commit its predecessor made.
- Scope locks. Retiring facts (consolidation, supersession at distillation) takes the scope's
  transaction advisory lock first, so two daemons never both retire facts of one scope from
  what each read before the other committed.

What it shares with the SQLite store lives in forged.store.common.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import psycopg_pool
import structlog
import trio

from forged.config import StoreConfig
from forged.errors import QueryTimeout, StorageFull, StoreError
from forged.models import StoredInteraction
from forged.store.common import SqlStore, new_rows, read_log
from forged.store.cursors import held_alone
from forged.store.portable import TEXT_KEY
from forged.store.postgres_schema import migrate
from forged.store.readers import Readers, ReadWaits, asking
from forged.store.records import NewInteraction

__all__ = [
    "DISK_FULL",
    "LEASE_CLASS",
    "LEASE_POLL",
    "LOG_LOCK",
    "POLL_INTERVAL",
    "READERS",
    "SCOPE_CLASS",
    "SESSION_OPTIONS",
    "PostgresStore",
    "schema_version",
]

T = TypeVar("T")

LOG_LOCK = (0x666F7267, 0)  # advisory lock keys of the log barrier
LEASE_CLASS = 0x666F7268  # first advisory lock key of observer leases; the second is the name's
SCOPE_CLASS = 0x666F7269  # first advisory lock key of a scope's facts; the second is its name's
LEASE_POLL = 0.5  # seconds between attempts to take a lease, and between checks of one held
POLL_INTERVAL = 0.5  # seconds a feeder waits before looking for other daemons' appends
DISK_FULL = "53100"  # SQLSTATE disk_full
# 202 only after a durable COMMIT; a killed daemon's backend that waits on a lock (a read behind
# the log barrier) notices the closed connection and leaves the queue (PostgreSQL 14 or later).
SESSION_OPTIONS = "-c synchronous_commit=on -c client_connection_check_interval=1000"
READERS = 3  # concurrent reads of the main pool (it keeps one connection for the writer)
QUERY_CANCELED = "57014"  # SQLSTATE query_canceled: what statement_timeout raises

_INSERT_INTERACTION = f"""
    INSERT INTO interactions
        (client_id, scope, session, timestamp, received_at, tokens, messages, metadata)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT (scope, {TEXT_KEY}(client_id)) DO NOTHING RETURNING seq
"""  # another daemon may store the same client id meanwhile: then this row is a duplicate
_LEASE_HELD = """
    SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objid = %s
        AND objsubid = 2 AND pid = %s AND granted
"""
log = structlog.get_logger(__name__)


def _one_line(exc: psycopg.Error) -> str:
    """libpq's message on one line (it spreads some over several, with hints)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _translate(exc: psycopg.Error) -> StoreError:
    if exc.sqlstate == DISK_FULL:
        return StorageFull("the disk holding the database is full")
    return StoreError(f"PostgreSQL: {_one_line(exc)}")


def _key(name: str) -> int:
    """The second key of a name's advisory lock: a positive 32-bit hash of it."""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def _connect_kwargs(config: StoreConfig) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autocommit": True, "options": SESSION_OPTIONS}
    if config.password_file:
        kwargs["password"] = Path(config.password_file).read_text().strip()
    return kwargs


def _append(conn: psycopg.Connection[Any], requests: list[list[NewInteraction]]) -> list[int]:
    """Insert the requests in one transaction behind the log barrier; return what each added."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", LOG_LOCK)

        def stored(keys: list[tuple[str, str]]) -> Iterable[tuple[str, str]]:
            sql = f"""SELECT i.scope, i.client_id FROM interactions AS i
                JOIN unnest(%s::text[], %s::text[]) AS k (scope, client_id)
                ON i.scope = k.scope AND {TEXT_KEY}(i.client_id) = {TEXT_KEY}(k.client_id)
                AND i.client_id = k.client_id"""  # by the unique index, then exactly
            scopes, ids = [s for s, _ in keys], [c for _, c in keys]
            return ((r[0], r[1]) for r in cur.execute(sql, (scopes, ids)))

        rows, accepted = new_rows(requests, stored)
        inserted: list[bool] = []
        if rows:
            cur.executemany(_INSERT_INTERACTION, rows, returning=True)
            while True:
                inserted.append(cur.fetchone() is not None)
                if not cur.nextset():
                    break
    counts, position = [], 0  # a row another daemon stored first is a duplicate after all
    for count in accepted:
        counts.append(sum(inserted[position : position + count]))
        position += count
    return counts


def _read_log(conn: psycopg.Connection[Any], after: int, limit: int) -> list[StoredInteraction]:
    """The log after `after`, read behind the barrier: no append is in flight below what it sees."""
    with held_alone(conn, LOG_LOCK):
        return read_log(conn, after, limit)


def _settled(conn: psycopg.Connection[Any], observer: str) -> None:
    """Wait for the commit the observer's last holder may have in flight: its fence locked the
    watermark row before it checked the lease, so one that passed holds the row still. A new
    holder that read the watermark without waiting started from the one before that commit and
    wrote the batch's results a second time."""
    with conn.transaction():
        conn.execute(
            "INSERT INTO watermarks VALUES (%s, 0) ON CONFLICT (observer) DO NOTHING", (observer,)
        )
        conn.execute("SELECT seq FROM watermarks WHERE observer = %s FOR UPDATE", (observer,))


def _totals(conn: psycopg.Connection[Any]) -> tuple[int, int, dict[str, int]]:
    """The log's last seq and count, and the watermarks, read in one snapshot."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        row = conn.execute("SELECT coalesce(max(seq), 0), count(*) FROM interactions").fetchone()
        marks = conn.execute("SELECT observer, seq FROM watermarks").fetchall()
    last_seq, count = row or (0, 0)
    return last_seq, count, {observer: seq for observer, seq in marks}


def _database_size(conn: psycopg.Connection[Any]) -> int:
    """Bytes of the database on the server's disk (every table, index and TOAST of it)."""
    row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0


class PostgresStore(SqlStore):
    """A pool of connections to a PostgreSQL database, used from worker threads."""

    backend = "postgresql"
    poll_interval = POLL_INTERVAL  # other daemons append too, and wake no feeder here

    def __init__(self, config: StoreConfig) -> None:
        self.path = config.url
        self._kwargs = _connect_kwargs(config)
        timeout = config.busy_timeout_ms / 1000
        self._pool = psycopg_pool.ConnectionPool(
            config.url,
            min_size=1,
            max_size=config.pool_size,
            kwargs=self._kwargs,
            open=False,
            timeout=timeout,
            check=psycopg_pool.ConnectionPool.check_connection,
        )
        try:
            self._pool.open(wait=True, timeout=timeout)
            with self._pool.connection() as conn:
                self.schema_version = migrate(conn)
                row = conn.execute("SELECT coalesce(max(seq), 0), count(*) FROM interactions")
                self.last_seq, self.count = row.fetchone() or (0, 0)
        except psycopg.Error as exc:  # PoolTimeout too: no connection in time
            self._pool.close()
            raise StoreError(f"cannot use PostgreSQL at {config.url}: {_one_line(exc)}") from exc
        self._holders: dict[str, int] = {}  # observer -> backend pid of the lease connection
        self._write_limiter = trio.CapacityLimiter(1)
        self._read_limiter = trio.CapacityLimiter(READERS)
        # recall's own connections: no search waits behind the log, a write or an observer
        self._recall = psycopg_pool.ConnectionPool(
            config.url,
            min_size=1,
            max_size=config.readers,
            kwargs=self._kwargs,
            open=False,
            timeout=timeout,
            check=psycopg_pool.ConnectionPool.check_connection,
        )
        try:
            self._recall.open(wait=True, timeout=timeout)
        except psycopg.Error as exc:
            self._pool.close()
            self._recall.close()
            raise StoreError(f"cannot use PostgreSQL at {config.url}: {_one_line(exc)}") from exc
        self._readers = Readers([self._recall] * config.readers)

    def close(self) -> None:
        self._recall.close()
        self._pool.close()

    async def size_bytes(self) -> int:
        return await self.read(_database_size)

    def read_waits(self) -> ReadWaits:
        return self._readers.waits

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        try:
            with self._pool.connection() as conn:
                return fn(conn, *args)
        except psycopg.Error as exc:  # PoolTimeout too: the server is down or saturated
            raise _translate(exc) from exc

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(self._call, fn, args, limiter=self._write_limiter)

    async def read(
        self,
        fn: Callable[..., T],
        *args: Any,
        scope: str | None = None,
        budget: float | None = None,
    ) -> T:
        """Run `fn(connection, *args)` in a thread, on a pooled connection in autocommit mode:
        a scope's or a client's read (recall's, the listings') on a recall connection free for
        both, stopped by `statement_timeout` after `budget` seconds; forged's own reads of no
        scope on the main pool, where no client's read can hold them up."""
        client = asking()
        if scope is None and client is None:
            return await trio.to_thread.run_sync(self._call, fn, args, limiter=self._read_limiter)
        return await self._readers.run(
            lambda pool: self._recall_call(pool, fn, args, budget), scope, client
        )

    @staticmethod
    def _recall_call(
        pool: psycopg_pool.ConnectionPool[Any],
        fn: Callable[..., T],
        args: tuple[Any, ...],
        budget: float | None,
    ) -> T:
        ms = 0 if budget is None else max(1, round(budget * 1000))  # 0: no limit
        try:
            with pool.connection() as conn:
                conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{ms}ms",))
                return fn(conn, *args)
        except psycopg.Error as exc:
            if exc.sqlstate == QUERY_CANCELED and budget is not None:
                raise QueryTimeout(budget) from exc
            raise _translate(exc) from exc

    async def append(self, requests: list[list[NewInteraction]]) -> list[int]:
        """Commit the interactions of several requests together; return what each added."""
        accepted = await self._write(_append, requests)
        row = await self.read(lambda c: c.execute("SELECT max(seq) FROM interactions").fetchone())
        self.last_seq = max(self.last_seq, row[0] or 0)
        self.count += sum(accepted)
        return accepted

    async def refresh_totals(self) -> dict[str, int]:
        """Read the log's totals from the shared table (other daemons append too, so what this
        one counted is not the log); answer every observer's stored watermark."""
        last_seq, count, watermarks = await self.read(_totals)
        self.last_seq, self.count = max(self.last_seq, last_seq), count
        return watermarks

    async def read_log(self, after: int, limit: int) -> list[StoredInteraction]:
        """Up to `limit` interactions with seq greater than `after`, in seq order."""
        rows = await self.read(_read_log, after, limit)
        if rows:
            self.last_seq = max(self.last_seq, rows[-1].seq)
        return rows

    def _transaction(self, conn: psycopg.Connection[Any]) -> Any:
        return conn.transaction()

    def _fence(self, conn: psycopg.Connection[Any], observer: str) -> None:
        """Lock the observer's watermark row; fail unless this daemon still holds its lease."""
        conn.execute(
            "INSERT INTO watermarks VALUES (%s, 0) ON CONFLICT (observer) DO NOTHING", (observer,)
        )
        conn.execute("SELECT seq FROM watermarks WHERE observer = %s FOR UPDATE", (observer,))
        holder = self._holders.get(observer)
        if (
            holder is None
            or not conn.execute(_LEASE_HELD, (LEASE_CLASS, _key(observer), holder)).fetchone()
        ):
            raise StoreError(f"this daemon no longer holds the lease of observer {observer!r}")

    def _scope_end(self, conn: psycopg.Connection[Any], scope: str) -> int:
        """The scope's last seq, read behind the log barrier: an append in flight when a forget
        read it (a seq taken before, committed after) left a turn of the scope in the log,
        below what the observers then skipped as forgotten, never distilled nor embedded."""
        with held_alone(conn, LOG_LOCK):
            return super()._scope_end(conn, scope)

    def _lock_scope(self, conn: psycopg.Connection[Any], scope: str) -> None:
        """Daemons retire a scope's facts one transaction at a time: each reads what the last
        one committed (read committed takes a new snapshot per statement)."""
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (SCOPE_CLASS, _key(scope)))

    def _lease_connection(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.path, **self._kwargs)
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    @staticmethod
    def _try_lock(conn: psycopg.Connection[Any], observer: str) -> bool:
        try:
            sql = "SELECT pg_try_advisory_lock(%s, %s)"
            return bool(conn.execute(sql, (LEASE_CLASS, _key(observer))).fetchone()[0])  # type: ignore[index]  # an aggregate-free SELECT answers one row
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    @asynccontextmanager
    async def lease(self, observer: str, follow: Callable[[int], None]) -> AsyncIterator[None]:
        """Hold `observer`'s lease for the block: wait for it, then keep checking the session.

        While another daemon holds it, `follow` gets the stored watermark now and then, so this
        daemon's status and backlog stay true. A lost connection ends the block with StoreError.
        """
        conn = await trio.to_thread.run_sync(self._lease_connection)
        try:
            while not await trio.to_thread.run_sync(self._try_lock, conn, observer):
                follow(await self.watermark(observer))
                await trio.sleep(LEASE_POLL)
            self._holders[observer] = conn.info.backend_pid
            await self.read(_settled, observer)  # no write of this daemon waits meanwhile
            log.info("lease_taken", observer=observer)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep, conn)
                yield
                nursery.cancel_scope.cancel()
        finally:
            self._holders.pop(observer, None)
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(conn.close)

    async def _keep(self, conn: psycopg.Connection[Any]) -> None:
        """Raise StoreError once the lease's session is gone (the lock went with it)."""
        while True:
            await trio.sleep(LEASE_POLL)
            await trio.to_thread.run_sync(self._ping, conn)

    @staticmethod
    def _ping(conn: psycopg.Connection[Any]) -> None:
        try:
            conn.execute("SELECT 1")
        except psycopg.Error as exc:
            raise _translate(exc) from exc


def schema_version(config: StoreConfig) -> int:
    """The schema version of the database at `config.url` (0 before the first start)."""
    try:
        with psycopg.connect(config.url, connect_timeout=10, **_connect_kwargs(config)) as conn:
            if conn.execute("SELECT to_regclass('schema_migrations')").fetchone() == (None,):
                return 0
            row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations")
            return int((row.fetchone() or (0,))[0])
    except psycopg.Error as exc:
        raise StoreError(f"cannot use PostgreSQL at {config.url}: {_one_line(exc)}") from exc
