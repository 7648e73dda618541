"""The SQLite store: the interaction log, distilled results and watermarks, one writer at a time."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import msgspec
import trio

from forged.errors import StorageFull, StoreError
from forged.models import (
    BatchOutcome,
    DeadLetterInfo,
    Message,
    NewInteraction,
    ObserverStatus,
    OpenDeadLetter,
    StoredInteraction,
    normalise,
)
from forged.schema import migrate
from forged.timestamps import now

P = ParamSpec("P")
T = TypeVar("T")

_MESSAGES = msgspec.json.Decoder(list[Message])
_INSERT_INTERACTION = """
    INSERT INTO interactions
        (client_id, scope, session, timestamp, received_at, tokens, messages, metadata)
    SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8
    WHERE ?1 IS NULL OR NOT EXISTS (SELECT 1 FROM interactions WHERE client_id = ?1)
"""  # not ON CONFLICT: a duplicate must not use up a seq
_INSERT_FACT = """
    INSERT INTO facts (kind, text, norm, scope, session, batch_id, first_seq, last_seq,
                       created_at, last_seen_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (scope, kind, norm) DO UPDATE SET
        seen_count = seen_count + 1,
        last_seen_at = excluded.last_seen_at,
        last_seq = max(last_seq, excluded.last_seq)
"""
RAW_EXCERPT_CHARS = 500  # how much of a dead letter's raw answer a listing shows
_OPEN_DEAD_LETTERS = """
    SELECT d.id, d.seq, d.reason, d.raw, d.created_at,
           i.seq, i.scope, i.session, i.timestamp, i.tokens, i.messages
    FROM dead_letters d JOIN interactions i ON i.seq = d.seq
    WHERE d.observer = ? AND d.resolved_at IS NULL AND d.seq BETWEEN ? AND ?
    ORDER BY d.seq, d.id
"""
_READ_LOG = """
    SELECT seq, scope, session, timestamp, tokens, messages FROM interactions
    WHERE seq > ? ORDER BY seq LIMIT ?
"""


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


def _row_to_interaction(row: tuple[Any, ...]) -> StoredInteraction:
    seq, scope, session, timestamp, tokens, messages = row
    return StoredInteraction(seq, scope, session, timestamp, tokens, _MESSAGES.decode(messages))


def _append(
    conn: sqlite3.Connection, requests: list[list[NewInteraction]]
) -> tuple[list[int], int]:
    """Insert the requests in one transaction; return what each added, and the last seq."""
    accepted = []
    with atomic(conn):
        for request in requests:
            before = conn.total_changes
            conn.executemany(_INSERT_INTERACTION, (msgspec.structs.astuple(i) for i in request))
            accepted.append(conn.total_changes - before)
        (last_seq,) = conn.execute("SELECT coalesce(max(seq), 0) FROM interactions").fetchone()
    return accepted, last_seq


def _commit_batch(conn: sqlite3.Connection, observer: str, outcome: BatchOutcome) -> None:
    created = now()
    with atomic(conn):
        for r in outcome.results:
            conn.execute(
                "INSERT INTO summaries (observer, batch_id, scope, session, text, first_seq,"
                " last_seq, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    observer,
                    r.batch_id,
                    r.scope,
                    r.session,
                    r.summary,
                    r.first_seq,
                    r.last_seq,
                    created,
                ),
            )
            conn.executemany(
                _INSERT_FACT,
                (
                    (
                        f.kind,
                        f.text,
                        normalise(f.text),
                        r.scope,
                        r.session,
                        r.batch_id,
                        r.first_seq,
                        r.last_seq,
                        created,
                        created,
                    )
                    for f in r.facts
                ),
            )
        conn.executemany(
            "INSERT INTO dead_letters (observer, seq, reason, raw, created_at) VALUES (?, ?, ?, ?, ?)",
            ((observer, d.seq, d.reason, d.raw, created) for d in outcome.dead_letters),
        )
        conn.executemany(
            "UPDATE dead_letters SET resolved_at = ? WHERE id = ? AND resolved_at IS NULL",
            ((created, i) for i in outcome.resolved_dead_letters),
        )
        conn.executemany(
            "INSERT INTO distill_runs (observer, batch_id, model, scope, interactions, first_seq,"
            " last_seq, llm_calls, prompt_tokens, completion_tokens, ms, outcome, error, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (
                    observer,
                    r.batch_id,
                    r.model,
                    r.scope,
                    r.interactions,
                    r.first_seq,
                    r.last_seq,
                    r.usage.calls,
                    r.usage.prompt_tokens,
                    r.usage.completion_tokens,
                    r.usage.ms,
                    r.outcome,
                    r.error,
                    created,
                )
                for r in outcome.runs
            ),
        )
        if outcome.watermark is not None:
            _set_watermark(conn, observer, outcome.watermark)


def _set_watermark(conn: sqlite3.Connection, observer: str, seq: int) -> None:
    conn.execute(
        "INSERT INTO watermarks VALUES (?, ?)"
        " ON CONFLICT (observer) DO UPDATE SET seq = max(seq, excluded.seq)",
        (observer, seq),
    )


def _observer_totals(conn: sqlite3.Connection, observer: str) -> ObserverStatus:
    row = conn.execute(
        "SELECT count(DISTINCT batch_id), coalesce(sum(llm_calls), 0),"
        " coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0),"
        " coalesce(sum(ms), 0), max(created_at) FROM distill_runs WHERE observer = ?",
        (observer,),
    ).fetchone()
    (dead,) = conn.execute(
        "SELECT count(*) FROM dead_letters WHERE observer = ? AND resolved_at IS NULL", (observer,)
    ).fetchone()
    (watermark,) = conn.execute(
        "SELECT coalesce(max(seq), 0) FROM watermarks WHERE observer = ?", (observer,)
    ).fetchone()
    batches, calls, prompt, completion, ms, last = row
    return ObserverStatus(
        name=observer,
        watermark=watermark,
        batches=batches,
        llm_calls=calls,
        prompt_tokens=prompt,
        completion_tokens=completion,
        llm_ms=ms,
        dead_letters=dead,
        last_batch_at=last,
    )


class Store:
    """The database, opened once: a writer connection behind a `CapacityLimiter(1)` and a reader.

    Every blocking call runs in a worker thread; the limiters make sure each connection is used
    by one thread at a time.
    """

    def __init__(self, path: str, busy_timeout_ms: int = 5000) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # memory is private: SQLite gives the -wal and -shm files the mode of the database file
        Path(path).touch(mode=0o600, exist_ok=True)
        try:
            self._writer = _connect(path, busy_timeout_ms)
            self.schema_version = migrate(self._writer)
            self._reader = _connect(path, busy_timeout_ms)
            self.last_seq, self.count = self._writer.execute(
                "SELECT coalesce(max(seq), 0), count(*) FROM interactions"
            ).fetchone()
        except sqlite3.Error as exc:
            raise _translate(exc) from exc
        self.path = path
        self.forgotten: dict[str, int] = {}  # scope -> last seq when it was forgotten
        self._write_limiter = trio.CapacityLimiter(1)
        self._read_limiter = trio.CapacityLimiter(1)

    def close(self) -> None:
        self._reader.close()
        self._writer.close()

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(writer_connection, *args)` in a thread, one writer at a time."""
        return await trio.to_thread.run_sync(
            self._call, fn, self._writer, args, limiter=self._write_limiter
        )

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(reader_connection, *args)` in a thread."""
        return await trio.to_thread.run_sync(
            self._call, fn, self._reader, args, limiter=self._read_limiter
        )

    @staticmethod
    def _call(fn: Callable[..., T], conn: sqlite3.Connection, args: tuple[Any, ...]) -> T:
        try:
            return fn(conn, *args)
        except sqlite3.Error as exc:
            raise _translate(exc) from exc

    async def append(self, requests: list[list[NewInteraction]]) -> list[int]:
        """Commit the interactions of several requests together; return what each added."""
        accepted, self.last_seq = await self.write(_append, requests)
        self.count += sum(accepted)
        return accepted

    async def read_log(self, after: int, limit: int) -> list[StoredInteraction]:
        """Up to `limit` interactions with seq greater than `after`, in seq order."""
        rows = await self.read(lambda c: c.execute(_READ_LOG, (after, limit)).fetchall())
        return [_row_to_interaction(r) for r in rows]

    async def commit_batch(self, observer: str, outcome: BatchOutcome) -> None:
        """Write a batch's results, dead letters, runs and watermark in one transaction.

        Results of a scope forgotten while the batch was with the LLM are dropped: forgetting
        must not be undone by an answer that arrives late. (After a restart such a batch is
        read again from the log, where the forgotten interactions no longer are.)
        """
        kept = [r for r in outcome.results if r.last_seq > self.forgotten.get(r.scope, 0)]
        if len(kept) < len(outcome.results):
            outcome = msgspec.structs.replace(outcome, results=kept)
        await self.write(_commit_batch, observer, outcome)

    async def set_watermark(self, observer: str, seq: int) -> None:
        await self.write(lambda c: _with_atomic(c, _set_watermark, observer, seq))

    async def watermark(self, observer: str) -> int:
        """Every seq up to this one is done for the observer."""
        sql = "SELECT coalesce(max(seq), 0) FROM watermarks WHERE observer = ?"
        row = await self.read(lambda c: c.execute(sql, (observer,)).fetchone())
        return int(row[0])

    async def observer_totals(self, observer: str) -> ObserverStatus:
        return await self.read(_observer_totals, observer)

    async def _open_dead_letter_rows(
        self, observer: str, first_seq: int, last_seq: int
    ) -> list[tuple[Any, ...]]:
        return await self.read(
            lambda c: c.execute(_OPEN_DEAD_LETTERS, (observer, first_seq, last_seq)).fetchall()
        )

    async def open_dead_letters(
        self, observer: str, first_seq: int = 0, last_seq: int = 2**63 - 1
    ) -> list[OpenDeadLetter]:
        """The observer's unresolved dead letters with seq in the range, with their interactions."""
        rows = await self._open_dead_letter_rows(observer, first_seq, last_seq)
        return [OpenDeadLetter(r[0], r[2], _row_to_interaction(r[5:])) for r in rows]

    async def list_dead_letters(
        self, observer: str, first_seq: int = 0, last_seq: int = 2**63 - 1
    ) -> list[DeadLetterInfo]:
        """The observer's unresolved dead letters, for inspection."""
        rows = await self._open_dead_letter_rows(observer, first_seq, last_seq)
        return [
            DeadLetterInfo(
                id=r[0],
                seq=r[1],
                scope=r[6],
                reason=r[2],
                raw_excerpt=None if r[3] is None else r[3][:RAW_EXCERPT_CHARS],
                created_at=r[4],
            )
            for r in rows
        ]


def _with_atomic(conn: sqlite3.Connection, fn: Callable[..., None], *args: Any) -> None:
    with atomic(conn):
        fn(conn, *args)
