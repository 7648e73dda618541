"""The PostgreSQL store: one memory shared by many daemons, with the SQLite store's guarantees.

Observer progress across daemons (see docs/architecture.md, "Many daemons, one memory"):

- The log barrier. Every append holds a shared advisory lock on the log until it commits; a
  feeder reads the log only while holding that lock exclusively. So every seq allocated before a
  read is committed (or rolled back) when the read looks, and every seq allocated after it is
  larger than any it sees: a watermark never passes a seq that commits later.
- Observer leases. An observer runs in one daemon at a time: the one whose connection holds the
  observer's session advisory lock. A daemon that dies releases it with its session; another
  takes it and starts at the stored watermark, so an unfinished batch is done again, once.
- Fencing. A commit that moves a watermark locks the watermark row and checks, in the same
  transaction, that this daemon still holds the lease; a new holder reads the row after taking
  the lease, so it sees every commit its predecessor made.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import psycopg
import psycopg_pool
import structlog
import trio

from forged.config import StoreConfig
from forged.errors import StorageFull, StoreError
from forged.models import (
    BatchOutcome,
    DeadLetterInfo,
    Deleted,
    Fact,
    Forgotten,
    NewInteraction,
    ObserverStatus,
    OpenDeadLetter,
    ScopeResult,
    StoredInteraction,
    normalise,
)
from forged.pgschema import migrate
from forged.store import RAW_EXCERPT_CHARS, new_rows
from forged.store import _row_to_interaction as row_to_interaction
from forged.timestamps import now

T = TypeVar("T")

LOG_LOCK = (0x666F7267, 0)  # advisory lock keys of the log barrier
LEASE_CLASS = 0x666F7268  # first advisory lock key of observer leases; the second is the name's
LEASE_POLL = 0.5  # seconds between attempts to take a lease, and between checks of one held
POLL_INTERVAL = 0.5  # seconds a feeder waits before looking for other daemons' appends
DISK_FULL = "53100"  # SQLSTATE disk_full
# 202 only after a durable COMMIT; a killed daemon's backend that waits on a lock (a read behind
# the log barrier) notices the closed connection and leaves the queue (PostgreSQL 14 or later).
SESSION_OPTIONS = "-c synchronous_commit=on -c client_connection_check_interval=1000"
READERS = 3  # concurrent reads per daemon (the pool keeps one connection for the writer)

_INSERT_INTERACTION = """
    INSERT INTO interactions
        (client_id, scope, session, timestamp, received_at, tokens, messages, metadata)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT (client_id) DO NOTHING RETURNING seq
"""  # another daemon may store the same client id meanwhile: then this row is a duplicate
_INSERT_FACT = """
    INSERT INTO facts (kind, text, norm, scope, session, batch_id, first_seq, last_seq,
                       first_at, last_at, created_at, last_seen_at)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT (scope, kind, norm) DO UPDATE SET
        seen_count = facts.seen_count + 1,
        last_seen_at = excluded.last_seen_at,
        last_seq = greatest(facts.last_seq, excluded.last_seq),
        first_at = least(facts.first_at, excluded.first_at),
        last_at = greatest(facts.last_at, excluded.last_at)
"""
_INSERT_RUN = """
    INSERT INTO distill_runs (observer, batch_id, model, scope, interactions, first_seq, last_seq,
        llm_calls, prompt_tokens, completion_tokens, ms, outcome, error, created_at, ungrounded)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""
_SPAN = """
    SELECT min(timestamp), max(timestamp) FROM interactions
    WHERE scope = %s AND seq BETWEEN %s AND %s
"""
_OPEN_DEAD_LETTERS = """
    SELECT d.id, d.seq, d.reason, d.raw, d.created_at,
           i.seq, i.scope, i.session, i.timestamp, i.tokens, i.messages
    FROM dead_letters d JOIN interactions i ON i.scope = d.scope AND i.seq = d.seq
    WHERE d.observer = %s AND d.resolved_at IS NULL AND d.seq BETWEEN %s AND %s
    ORDER BY d.seq, d.id
"""
_READ_LOG = """
    SELECT seq, scope, session, timestamp, tokens, messages FROM interactions
    WHERE seq > %s ORDER BY seq LIMIT %s
"""
_TOTALS = """
    SELECT count(DISTINCT batch_id), coalesce(sum(llm_calls), 0), coalesce(sum(prompt_tokens), 0),
           coalesce(sum(completion_tokens), 0), coalesce(sum(ms), 0), max(created_at),
           coalesce(sum(ungrounded), 0),
           (SELECT count(*) FROM dead_letters WHERE observer = %(o)s AND resolved_at IS NULL),
           (SELECT coalesce(max(seq), 0) FROM watermarks WHERE observer = %(o)s)
    FROM distill_runs WHERE observer = %(o)s
"""
_LEASE_HELD = """
    SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objid = %s
        AND objsubid = 2 AND pid = %s AND granted
"""
# Every table holding a scope's rows; each carries the scope, so each delete stays in one shard.
_SCOPE_TABLES = (
    "dead_letters",
    "distill_runs",
    "interactions",
    "summaries",
    "facts",
    "consolidation_changes",
    "consolidation_runs",
    "consolidation_progress",
)

log = structlog.get_logger("forged.pgstore")


def _one_line(exc: psycopg.Error) -> str:
    """libpq's message on one line (it spreads some over several, with hints)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _translate(exc: psycopg.Error) -> StoreError:
    if exc.sqlstate == DISK_FULL:
        return StorageFull("the disk holding the database is full")
    return StoreError(f"PostgreSQL: {_one_line(exc)}")


def _lease_key(observer: str) -> int:
    """The second advisory lock key of an observer's lease: a positive 32-bit hash of its name."""
    return zlib.crc32(observer.encode()) & 0x7FFFFFFF


def _connect_kwargs(config: StoreConfig) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autocommit": True, "options": SESSION_OPTIONS}
    if config.password_file:
        kwargs["password"] = Path(config.password_file).read_text().strip()
    return kwargs


def _append(conn: psycopg.Connection[Any], requests: list[list[NewInteraction]]) -> list[int]:
    """Insert the requests in one transaction behind the log barrier; return what each added."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", LOG_LOCK)

        def stored(ids: list[str]) -> Iterable[str]:
            sql = "SELECT client_id FROM interactions WHERE client_id = ANY(%s)"
            return (r[0] for r in cur.execute(sql, (ids,)))

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


def _span(conn: psycopg.Connection[Any], scope: str, first: int, last: int) -> tuple[str, str]:
    first_at, last_at = conn.execute(_SPAN, (scope, first, last)).fetchone() or (None, None)
    if first_at is None:  # no source left to date it by: it can only be dated by now
        stamp = now()
        return stamp, stamp
    return str(first_at), str(last_at)


def _fact_row(
    conn: psycopg.Connection[Any], r: ScopeResult, f: Fact, created: str
) -> tuple[Any, ...]:
    first_seq, last_seq = min(f.sources, default=r.first_seq), max(f.sources, default=r.last_seq)
    first_at, last_at = _span(conn, r.scope, first_seq, last_seq)
    return (f.kind, f.text, normalise(f.text), r.scope, r.session, r.batch_id, first_seq,
            last_seq, first_at, last_at, created, created)  # fmt: skip


def _logged(conn: psycopg.Connection[Any], seq: int) -> bool:
    return conn.execute("SELECT 1 FROM interactions WHERE seq = %s", (seq,)).fetchone() is not None


def _fence(conn: psycopg.Connection[Any], observer: str, holder: int | None) -> None:
    """Lock the observer's watermark row; fail unless this daemon still holds its lease."""
    conn.execute(
        "INSERT INTO watermarks VALUES (%s, 0) ON CONFLICT (observer) DO NOTHING", (observer,)
    )
    conn.execute("SELECT seq FROM watermarks WHERE observer = %s FOR UPDATE", (observer,))
    if (
        holder is None
        or not conn.execute(_LEASE_HELD, (LEASE_CLASS, _lease_key(observer), holder)).fetchone()
    ):
        raise StoreError(f"this daemon no longer holds the lease of observer {observer!r}")


def _set_watermark(conn: psycopg.Connection[Any], observer: str, seq: int) -> None:
    conn.execute(
        "UPDATE watermarks SET seq = greatest(seq, %s) WHERE observer = %s", (seq, observer)
    )


def _write_results(conn: psycopg.Connection[Any], observer: str, outcome: BatchOutcome) -> None:
    created = now()
    for r in outcome.results:
        first_at, last_at = _span(conn, r.scope, r.first_seq, r.last_seq)
        if r.summary:  # an extractive distiller writes none
            conn.execute(
                "INSERT INTO summaries (observer, batch_id, scope, session, text, first_seq,"
                " last_seq, first_at, last_at, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (observer, r.batch_id, r.scope, r.session, r.summary, r.first_seq,
                 r.last_seq, first_at, last_at, created),
            )  # fmt: skip
        with conn.cursor() as cur:
            cur.executemany(_INSERT_FACT, [_fact_row(conn, r, f, created) for f in r.facts])
    for d in outcome.dead_letters:
        conn.execute(
            "INSERT INTO dead_letters (observer, scope, seq, reason, raw, created_at)"
            " SELECT %s, scope, seq, %s, %s, %s FROM interactions WHERE seq = %s",
            (observer, d.reason, d.raw, created, d.seq),
        )
    with conn.cursor() as cur:
        cur.executemany(_INSERT_RUN, [
            (observer, r.batch_id, r.model, r.scope, r.interactions, r.first_seq, r.last_seq,
             r.usage.calls, r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.ms,
             r.outcome, r.error, created, r.ungrounded)
            for r in outcome.runs
        ])  # fmt: skip


def _commit_batch(
    conn: psycopg.Connection[Any], observer: str, outcome: BatchOutcome, holder: int | None
) -> BatchOutcome:
    with conn.transaction():
        if outcome.watermark is not None:
            _fence(conn, observer, holder)
        outcome = msgspec.structs.replace(  # what was forgotten meanwhile stays forgotten
            outcome,
            results=[r for r in outcome.results if _logged(conn, r.first_seq)],
            dead_letters=[d for d in outcome.dead_letters if _logged(conn, d.seq)],
            runs=[r for r in outcome.runs if _logged(conn, r.first_seq)],
        )
        _write_results(conn, observer, outcome)
        sql = "UPDATE dead_letters SET resolved_at = %s WHERE id = %s AND resolved_at IS NULL"
        resolved = [
            i for i in outcome.resolved_dead_letters if conn.execute(sql, (now(), i)).rowcount
        ]
        if outcome.watermark is not None:
            _set_watermark(conn, observer, outcome.watermark)
    return msgspec.structs.replace(outcome, resolved_dead_letters=resolved)


def _commit_watermark(
    conn: psycopg.Connection[Any], observer: str, seq: int, holder: int | None
) -> None:
    with conn.transaction():
        _fence(conn, observer, holder)
        _set_watermark(conn, observer, seq)


def _observer_totals(conn: psycopg.Connection[Any], observer: str) -> ObserverStatus:
    row = conn.execute(_TOTALS, {"o": observer}).fetchone()
    assert row is not None  # an aggregate always answers one row
    batches, calls, prompt, completion, ms, last, ungrounded, dead, watermark = row
    return ObserverStatus(name=observer, watermark=watermark, batches=batches, llm_calls=calls,
                          prompt_tokens=prompt, completion_tokens=completion, llm_ms=ms,
                          dead_letters=dead, ungrounded=ungrounded,
                          last_batch_at=last)  # fmt: skip


def _forget(conn: psycopg.Connection[Any], scope: str, observers: list[str]) -> Forgotten:
    """Erase every row of a scope in one transaction (the space is reclaimed by autovacuum)."""
    with conn.transaction():
        sql = "SELECT coalesce(max(seq), 0) FROM interactions WHERE scope = %s"
        (through,) = conn.execute(sql, (scope,)).fetchone() or (0,)
        erased = {
            table: conn.execute(f"DELETE FROM {table} WHERE scope = %s", (scope,)).rowcount
            for table in _SCOPE_TABLES
        }
        totals = {name: _observer_totals(conn, name) for name in observers}
    deleted = Deleted(erased["interactions"], erased["summaries"], erased["facts"])
    return Forgotten(deleted, through, totals)


def _read_log(conn: psycopg.Connection[Any], after: int, limit: int) -> list[StoredInteraction]:
    """The log after `after`, read behind the barrier: no append is in flight below what it sees."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", LOG_LOCK)
        rows = conn.execute(_READ_LOG, (after, limit)).fetchall()
    return [row_to_interaction(r) for r in rows]


class PostgresStore:
    """A pool of connections to a PostgreSQL database, used from worker threads."""

    backend = "postgresql"
    poll_interval = POLL_INTERVAL  # other daemons append too, and wake no feeder here

    def __init__(self, config: StoreConfig) -> None:
        self.path = config.url
        self._kwargs = _connect_kwargs(config)
        timeout = config.busy_timeout_ms / 1000
        self._pool = psycopg_pool.ConnectionPool(
            config.url, min_size=1, max_size=config.pool_size, kwargs=self._kwargs, open=False,
            timeout=timeout, check=psycopg_pool.ConnectionPool.check_connection,
        )  # fmt: skip
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

    def close(self) -> None:
        self._pool.close()

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        try:
            with self._pool.connection() as conn:
                return fn(conn, *args)
        except psycopg.Error as exc:  # PoolTimeout too: the server is down or saturated
            raise _translate(exc) from exc

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(self._call, fn, args, limiter=self._write_limiter)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(connection, *args)` in a thread, on a pooled connection in autocommit mode."""
        return await trio.to_thread.run_sync(self._call, fn, args, limiter=self._read_limiter)

    async def append(self, requests: list[list[NewInteraction]]) -> list[int]:
        """Commit the interactions of several requests together; return what each added."""
        accepted = await self._write(_append, requests)
        row = await self.read(lambda c: c.execute("SELECT max(seq) FROM interactions").fetchone())
        self.last_seq = max(self.last_seq, row[0] or 0)
        self.count += sum(accepted)
        return accepted

    async def read_log(self, after: int, limit: int) -> list[StoredInteraction]:
        """Up to `limit` interactions with seq greater than `after`, in seq order."""
        rows = await self.read(_read_log, after, limit)
        if rows:
            self.last_seq = max(self.last_seq, rows[-1].seq)
        return rows

    async def commit_batch(self, observer: str, outcome: BatchOutcome) -> BatchOutcome:
        """Write a batch's results, dead letters, runs and watermark in one transaction."""
        return await self._write(_commit_batch, observer, outcome, self._holders.get(observer))

    async def set_watermark(self, observer: str, seq: int) -> None:
        await self._write(_commit_watermark, observer, seq, self._holders.get(observer))

    async def forget(self, scope: str, observers: Iterable[str] = ()) -> Forgotten:
        """Erase everything of a scope, and total the observers' work that is left."""
        forgotten = await self._write(_forget, scope, list(observers))
        self.count -= forgotten.deleted.interactions
        return forgotten

    async def watermark(self, observer: str) -> int:
        sql = "SELECT coalesce(max(seq), 0) FROM watermarks WHERE observer = %s"
        row = await self.read(lambda c: c.execute(sql, (observer,)).fetchone())
        return int(row[0])

    async def observer_totals(self, observer: str) -> ObserverStatus:
        return await self.read(_observer_totals, observer)

    async def known_mode(self, endpoint: str) -> str | None:
        sql = "SELECT mode FROM llm_modes WHERE endpoint = %s"
        row = await self.read(lambda c: c.execute(sql, (endpoint,)).fetchone())
        return None if row is None else str(row[0])

    async def remember_mode(self, endpoint: str, mode: str) -> None:
        sql = (
            "INSERT INTO llm_modes VALUES (%s, %s, %s) ON CONFLICT (endpoint)"
            " DO UPDATE SET mode = excluded.mode, learned_at = excluded.learned_at"
        )
        await self._write(lambda c: c.execute(sql, (endpoint, mode, now())))

    async def _dead_letter_rows(self, observer: str, first: int, last: int) -> list[Any]:
        return await self.read(
            lambda c: c.execute(_OPEN_DEAD_LETTERS, (observer, first, last)).fetchall()
        )

    async def open_dead_letters(
        self, observer: str, first_seq: int = 0, last_seq: int = 2**63 - 1
    ) -> list[OpenDeadLetter]:
        rows = await self._dead_letter_rows(observer, first_seq, last_seq)
        return [OpenDeadLetter(r[0], r[2], row_to_interaction(r[5:])) for r in rows]

    async def list_dead_letters(
        self, observer: str, first_seq: int = 0, last_seq: int = 2**63 - 1
    ) -> list[DeadLetterInfo]:
        rows = await self._dead_letter_rows(observer, first_seq, last_seq)
        return [DeadLetterInfo(id=r[0], seq=r[1], scope=r[6], reason=r[2], created_at=r[4],
                               raw_excerpt=None if r[3] is None else r[3][:RAW_EXCERPT_CHARS])
                for r in rows]  # fmt: skip

    def _lease_connection(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.path, **self._kwargs)
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    @staticmethod
    def _try_lock(conn: psycopg.Connection[Any], observer: str) -> bool:
        try:
            sql = "SELECT pg_try_advisory_lock(%s, %s)"
            return bool(conn.execute(sql, (LEASE_CLASS, _lease_key(observer))).fetchone()[0])  # type: ignore[index]  # an aggregate-free SELECT answers one row
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
