"""The SQLite store: the interaction log, distilled results and watermarks, one writer at a time."""

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

from forged.backup import DatabaseLock
from forged.errors import StorageFull, StoreError
from forged.models import (
    BatchOutcome,
    ConsolidationChange,
    ConsolidationRun,
    DeadLetterInfo,
    Deleted,
    Fact,
    Forgotten,
    Message,
    NewInteraction,
    ObserverStatus,
    OpenDeadLetter,
    ScopeResult,
    StoredInteraction,
    normalise,
)
from forged.schema import migrate
from forged.timestamps import now

T = TypeVar("T")

_MESSAGES = msgspec.json.Decoder(list[Message])
_IDS = msgspec.json.Encoder()
_INSERT_INTERACTION = """
    INSERT INTO interactions
        (client_id, scope, session, timestamp, received_at, tokens, messages, metadata)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""  # duplicates are left out beforehand (not ON CONFLICT): a duplicate must not use up a seq
_STORED_IDS = """
    SELECT client_id FROM interactions WHERE client_id IN (SELECT value FROM json_each(?))
"""  # one query for a whole group, through the client_id index
_INSERT_FACT = """
    INSERT INTO facts (kind, text, norm, scope, session, batch_id, first_seq, last_seq,
                       first_at, last_at, created_at, last_seen_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (scope, kind, norm) DO UPDATE SET
        seen_count = seen_count + 1,
        last_seen_at = excluded.last_seen_at,
        last_seq = max(last_seq, excluded.last_seq),
        first_at = CASE WHEN {revived} THEN excluded.first_at
                        ELSE min(first_at, excluded.first_at) END,
        last_at = max(last_at, excluded.last_at),
        invalid_at = CASE WHEN {revived} THEN NULL ELSE invalid_at END,
        superseded_by = CASE WHEN {revived} THEN NULL ELSE superseded_by END,
        superseded_reason = CASE WHEN {revived} THEN NULL ELSE superseded_reason END
""".format(revived="excluded.first_at > invalid_at")  # said again after it stopped being true
_SUPERSEDE = """
    UPDATE facts SET superseded_by = :into, superseded_reason = :reason,
        invalid_at = CASE WHEN :action = 'supersede'
                          THEN max(first_at, (SELECT first_at FROM facts WHERE id = :into)) END
    WHERE id = :fact AND id != :into AND scope = :scope AND superseded_by IS NULL
      AND EXISTS (SELECT 1 FROM facts AS n WHERE n.id = :into AND n.scope = :scope
                  AND n.superseded_by IS NULL
                  AND (:action = 'merge' OR n.first_at >= facts.first_at))
"""  # a fact changed or forgotten since it was read is left alone; none is replaced by an older
_ABSORB = """
    UPDATE facts SET (first_at, last_at, seen_count) =
        (SELECT min(k.first_at, d.first_at), max(k.last_at, d.last_at), k.seen_count + d.seen_count
         FROM facts AS k, facts AS d WHERE k.id = :into AND d.id = :fact)
    WHERE id = :into
"""  # the kept fact of a merge takes the duplicate's dates and count
_SPAN = """
    SELECT min(timestamp), max(timestamp) FROM interactions
    WHERE scope = ? AND seq BETWEEN ? AND ?
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
# Every table holding a scope's rows, and which rows are the scope's: forgetting deletes them in
# this order (dead letters name a seq, not a scope, so they go before the interactions).
# A new table of per-scope rows is one more line; full-text indexes follow their content tables
# through triggers and are found by `_fts_tables`.
_SCOPE_ROWS = {
    "dead_letters": "seq IN (SELECT seq FROM interactions WHERE scope = :scope)",
    "distill_runs": "scope = :scope",
    "interactions": "scope = :scope",
    "summaries": "scope = :scope",
    "facts": "scope = :scope",
    "consolidation_changes": "scope = :scope",
    "consolidation_runs": "scope = :scope",
    "consolidation_progress": "scope = :scope",
}
CHECKPOINT_ATTEMPTS = 3  # TRUNCATE checkpoints tried while readers hold old snapshots


log = structlog.get_logger("forged.store")


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


def _stored_ids(conn: sqlite3.Connection, ids: list[str]) -> Iterable[str]:
    return (row[0] for row in conn.execute(_STORED_IDS, (_IDS.encode(ids),)))


def new_rows(
    requests: list[list[NewInteraction]], stored: Callable[[list[str]], Iterable[str]]
) -> tuple[list[tuple[Any, ...]], list[int]]:
    """The rows to insert, in order, and how many each request adds.

    An interaction whose client id is already stored (`stored` tells which of some ids are), or
    came earlier in the group (in the same request or another), is a duplicate.
    """
    ids = [i.client_id for request in requests for i in request if i.client_id is not None]
    seen: set[str] = set()
    if ids:
        seen.update(stored(ids))
    rows: list[tuple[Any, ...]] = []
    accepted = []
    for request in requests:
        before = len(rows)
        for item in request:
            if item.client_id is not None:
                if item.client_id in seen:
                    continue
                seen.add(item.client_id)
            rows.append(msgspec.structs.astuple(item))
        accepted.append(len(rows) - before)
    return rows, accepted


def _append(
    conn: sqlite3.Connection, requests: list[list[NewInteraction]]
) -> tuple[list[int], int]:
    """Insert the requests in one transaction; return what each added, and the last seq."""
    with atomic(conn):
        rows, accepted = new_rows(requests, lambda ids: _stored_ids(conn, ids))
        conn.executemany(_INSERT_INTERACTION, rows)
        (last_seq,) = conn.execute("SELECT coalesce(max(seq), 0) FROM interactions").fetchone()
    return accepted, last_seq


def _span(conn: sqlite3.Connection, scope: str, first_seq: int, last_seq: int) -> tuple[str, str]:
    """When the interactions a result comes from happened: their first and last timestamps."""
    first_at, last_at = conn.execute(_SPAN, (scope, first_seq, last_seq)).fetchone()
    if first_at is None:  # no source left to date it by: it can only be dated by now
        first_at = last_at = now()
    return first_at, last_at


def _fact_row(conn: sqlite3.Connection, r: ScopeResult, f: Fact, created: str) -> tuple[Any, ...]:
    """A fact's row, dated by the interactions it names as sources (else by its whole batch)."""
    first_seq, last_seq = min(f.sources, default=r.first_seq), max(f.sources, default=r.last_seq)
    first_at, last_at = _span(conn, r.scope, first_seq, last_seq)
    return (f.kind, f.text, normalise(f.text), r.scope, r.session, r.batch_id, first_seq,
            last_seq, first_at, last_at, created, created)  # fmt: skip


def _logged(conn: sqlite3.Connection, seq: int) -> bool:
    return conn.execute("SELECT 1 FROM interactions WHERE seq = ?", (seq,)).fetchone() is not None


def _still_logged(conn: sqlite3.Connection, outcome: BatchOutcome) -> BatchOutcome:
    """The part of a batch whose interactions are still in the log.

    A scope forgotten while its interactions were with an observer must not come back with
    the answer. Forgetting erases every seq of the scope up to its last one, so the results,
    runs and dead letters of a scope whose first seq is gone were forgotten, all of them.
    """
    return msgspec.structs.replace(
        outcome,
        results=[r for r in outcome.results if _logged(conn, r.first_seq)],
        dead_letters=[d for d in outcome.dead_letters if _logged(conn, d.seq)],
        runs=[r for r in outcome.runs if _logged(conn, r.first_seq)],
    )


def _commit_batch(conn: sqlite3.Connection, observer: str, outcome: BatchOutcome) -> BatchOutcome:
    created = now()
    with atomic(conn):
        outcome = _still_logged(conn, outcome)
        for r in outcome.results:
            first_at, last_at = _span(conn, r.scope, r.first_seq, r.last_seq)
            if r.summary:  # an extractive distiller writes none
                conn.execute(
                    "INSERT INTO summaries (observer, batch_id, scope, session, text, first_seq,"
                    " last_seq, first_at, last_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (observer, r.batch_id, r.scope, r.session, r.summary, r.first_seq,
                     r.last_seq, first_at, last_at, created),
                )  # fmt: skip
            conn.executemany(_INSERT_FACT, (_fact_row(conn, r, f, created) for f in r.facts))
            _supersede_replaced(conn, observer, r, created)
        conn.executemany(
            "INSERT INTO dead_letters (observer, seq, reason, raw, created_at) VALUES (?, ?, ?, ?, ?)",
            ((observer, d.seq, d.reason, d.raw, created) for d in outcome.dead_letters),
        )
        resolved = [
            i
            for i in outcome.resolved_dead_letters
            if conn.execute(
                "UPDATE dead_letters SET resolved_at = ? WHERE id = ? AND resolved_at IS NULL",
                (created, i),
            ).rowcount
        ]
        conn.executemany(
            "INSERT INTO distill_runs (observer, batch_id, model, scope, interactions, first_seq,"
            " last_seq, llm_calls, prompt_tokens, completion_tokens, ms, outcome, error, created_at,"
            " ungrounded) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                    r.ungrounded,
                )
                for r in outcome.runs
            ),
        )
        if outcome.watermark is not None:
            _set_watermark(conn, observer, outcome.watermark)
    return msgspec.structs.replace(outcome, resolved_dead_letters=resolved)


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
        " coalesce(sum(ms), 0), max(created_at), coalesce(sum(ungrounded), 0)"
        " FROM (SELECT batch_id, llm_calls, prompt_tokens, completion_tokens, ms, created_at,"
        " ungrounded FROM distill_runs WHERE observer = :o UNION ALL"
        " SELECT run_id, llm_calls, prompt_tokens, completion_tokens, ms, created_at, ungrounded"
        " FROM consolidation_runs WHERE observer = :o)",
        {"o": observer},
    ).fetchone()
    (dead,) = conn.execute(
        "SELECT count(*) FROM dead_letters WHERE observer = ? AND resolved_at IS NULL", (observer,)
    ).fetchone()
    (watermark,) = conn.execute(
        "SELECT coalesce(max(seq), 0) FROM watermarks WHERE observer = ?", (observer,)
    ).fetchone()
    batches, calls, prompt, completion, ms, last, ungrounded = row
    return ObserverStatus(
        name=observer,
        watermark=watermark,
        batches=batches,
        llm_calls=calls,
        prompt_tokens=prompt,
        completion_tokens=completion,
        llm_ms=ms,
        dead_letters=dead,
        ungrounded=ungrounded,
        last_batch_at=last,
    )


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


def _forget(conn: sqlite3.Connection, scope: str, observers: list[str]) -> Forgotten:
    """Erase every row of a scope in one transaction, then its copies in the WAL.

    The triggers drop the rows' index entries; merging each index's segments leaves no deleted
    term in an old one. With `secure_delete` on, freed space is overwritten with zeros; the
    checkpoint then moves the zeroed pages into the database file and empties the WAL.
    """
    with atomic(conn):
        sql = "SELECT coalesce(max(seq), 0) FROM interactions WHERE scope = ?"
        (through,) = conn.execute(sql, (scope,)).fetchone()
        erased = {
            table: conn.execute(f"DELETE FROM {table} WHERE {rows}", {"scope": scope}).rowcount
            for table, rows in _SCOPE_ROWS.items()
        }
        if any(erased.values()):
            for fts in _fts_tables(conn):
                conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('optimize')")
        totals = {name: _observer_totals(conn, name) for name in observers}
    if any(erased.values()) and not _checkpoint(conn):
        log.warning("forget_checkpoint_busy", scope=scope)
    deleted = Deleted(erased["interactions"], erased["summaries"], erased["facts"])
    return Forgotten(deleted, through, totals)


def _apply(
    conn: sqlite3.Connection,
    observer: str,
    run_id: str,
    scope: str,
    c: ConsolidationChange,
    created: str,
) -> bool:
    """Retire a fact into another and record why; False when the change no longer applies."""
    change = {"action": c.action, "fact": c.fact_id, "into": c.into_id, "reason": c.reason,
              "scope": scope}  # fmt: skip
    if not conn.execute(_SUPERSEDE, change).rowcount:
        return False
    if c.action == "merge":
        conn.execute(_ABSORB, change)
    conn.execute(
        "INSERT INTO consolidation_changes (observer, run_id, scope, action, fact_id, into_id,"
        " reason, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (observer, run_id, scope, c.action, c.fact_id, c.into_id, c.reason, created),
    )
    return True


def _supersede_replaced(
    conn: sqlite3.Connection, observer: str, r: ScopeResult, created: str
) -> None:
    """Retire the known facts a batch's new facts replace, in the batch's transaction."""
    for f in r.facts:
        if not f.replaces:
            continue
        (into,) = conn.execute(
            "SELECT id FROM facts WHERE scope = ? AND kind = ? AND norm = ?",
            (r.scope, f.kind, normalise(f.text)),
        ).fetchone()
        reason = f"replaced by a newer {f.kind} when the batch was distilled"
        for old in f.replaces:
            _apply(conn, observer, r.batch_id, r.scope,
                   ConsolidationChange("supersede", old, into, reason), created)  # fmt: skip


def _condense(
    conn: sqlite3.Connection, observer: str, run: ConsolidationRun, created: str
) -> list[ConsolidationChange]:
    """Write the condensed summary and point the ones it stands in for at it; nothing when
    any of them changed or went meanwhile."""
    if run.condensed is None:
        return []
    ids = run.condensed.summary_ids
    marks = ", ".join("?" * len(ids))
    (first_seq, last_seq, first_at, last_at, current) = conn.execute(
        f"SELECT min(first_seq), max(last_seq), min(first_at), max(last_at), count(*)"
        f" FROM summaries WHERE scope = ? AND condensed_into IS NULL AND id IN ({marks})",
        (run.scope, *ids),
    ).fetchone()
    if current != len(ids):
        return []
    into = conn.execute(
        "INSERT INTO summaries (observer, batch_id, scope, session, text, first_seq, last_seq,"
        " first_at, last_at, created_at) VALUES (?, ?, ?, NULL, ?, ?, ?, ?, ?, ?)",
        (observer, run.run_id, run.scope, run.condensed.text, first_seq, last_seq, first_at,
         last_at, created),
    ).lastrowid  # fmt: skip
    assert into is not None
    conn.execute(f"UPDATE summaries SET condensed_into = ? WHERE id IN ({marks})", (into, *ids))
    reason = f"condensed with {len(ids) - 1} other older summaries"
    changes = [ConsolidationChange("condense", old, into, reason) for old in ids]
    conn.executemany(
        "INSERT INTO consolidation_changes (observer, run_id, scope, action, fact_id, into_id,"
        " reason, created_at) VALUES (?, ?, ?, 'condense', ?, ?, ?, ?)",
        [(observer, run.run_id, run.scope, c.fact_id, c.into_id, reason, created) for c in changes],
    )
    return changes


def _commit_consolidation(
    conn: sqlite3.Connection, observer: str, run: ConsolidationRun
) -> list[ConsolidationChange]:
    """Apply a run's changes, record them, the run and the scope's progress, all or nothing.

    Returns the changes applied; nothing is written for a scope forgotten meanwhile.
    """
    created = now()
    with atomic(conn):
        sql = "SELECT 1 FROM facts WHERE scope = ? LIMIT 1"
        if conn.execute(sql, (run.scope,)).fetchone() is None:
            return []
        applied = [
            c for c in run.changes if _apply(conn, observer, run.run_id, run.scope, c, created)
        ]
        applied += _condense(conn, observer, run, created)
        u = run.usage
        conn.execute(
            "INSERT INTO consolidation_runs (observer, run_id, model, scope, facts, changes,"
            " llm_calls, prompt_tokens, completion_tokens, ms, ungrounded, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (observer, run.run_id, run.model, run.scope, run.facts, len(applied), u.calls,
             u.prompt_tokens, u.completion_tokens, u.ms, run.ungrounded, created),
        )  # fmt: skip
        conn.execute(
            "INSERT INTO consolidation_progress VALUES (?, ?, ?, ?) ON CONFLICT (observer, scope)"
            " DO UPDATE SET fact_id = max(fact_id, excluded.fact_id), run_at = excluded.run_at",
            (observer, run.scope, run.through_fact_id, created),
        )
    return applied


def _remember_mode(conn: sqlite3.Connection, endpoint: str, mode: str) -> None:
    with atomic(conn):
        conn.execute(
            "INSERT OR REPLACE INTO llm_modes (endpoint, mode, learned_at) VALUES (?, ?, ?)",
            (endpoint, mode, now()),
        )


def _commit_watermark(conn: sqlite3.Connection, observer: str, seq: int) -> None:
    with atomic(conn):
        _set_watermark(conn, observer, seq)


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


class Store:
    """The database, opened once: a writer connection behind a `CapacityLimiter(1)` and a reader.

    Every blocking call runs in a worker thread; the limiters make sure each connection is used
    by one thread at a time.
    """

    def __init__(self, path: str, busy_timeout_ms: int = 5000) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # memory is private: SQLite gives the -wal and -shm files the mode of the database file
        Path(path).touch(mode=0o600, exist_ok=True)
        self._claim = DatabaseLock(path)  # no restore replaces the file while it is open here
        try:
            self._writer = _connect(path, busy_timeout_ms)
            self.schema_version = migrate(self._writer)
            self._reader = _connect(path, busy_timeout_ms)
            self.last_seq, self.count = self._writer.execute(
                "SELECT coalesce(max(seq), 0), count(*) FROM interactions"
            ).fetchone()
        except sqlite3.Error as exc:
            self._claim.release()
            raise _translate(exc) from exc
        self.path = path
        self._write_limiter = trio.CapacityLimiter(1)
        self._read_limiter = trio.CapacityLimiter(1)

    backend = "sqlite"
    poll_interval = math.inf  # every append goes through this daemon, which wakes the feeders

    @asynccontextmanager
    async def lease(self, observer: str, follow: Callable[[int], None]) -> AsyncIterator[None]:
        """The right to run `observer`: always this daemon's, the only one with the file open."""
        yield

    def close(self) -> None:
        self._reader.close()
        self._writer.close()
        self._claim.release()

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(writer_connection, *args)` in a thread, one writer at a time.

        Only the named write methods below call it, each with a function that writes inside
        `atomic()`: every write is a transaction the store owns.
        """
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
        accepted, self.last_seq = await self._write(_append, requests)
        self.count += sum(accepted)
        return accepted

    async def read_log(self, after: int, limit: int) -> list[StoredInteraction]:
        """Up to `limit` interactions with seq greater than `after`, in seq order."""
        rows = await self.read(lambda c: c.execute(_READ_LOG, (after, limit)).fetchall())
        return [_row_to_interaction(r) for r in rows]

    async def commit_batch(self, observer: str, outcome: BatchOutcome) -> BatchOutcome:
        """Write a batch's results, dead letters, runs and watermark in one transaction.

        What belongs to interactions forgotten while the batch was with the observer is left
        out: forgetting must not be undone by an answer that arrives late. Returns what was
        written.
        """
        return await self._write(_commit_batch, observer, outcome)

    async def commit_consolidation(
        self, observer: str, run: ConsolidationRun
    ) -> list[ConsolidationChange]:
        """Apply a consolidation run with the scope's progress in one transaction; return the
        changes that applied (one whose facts changed or went meanwhile does not)."""
        return await self._write(_commit_consolidation, observer, run)

    async def set_watermark(self, observer: str, seq: int) -> None:
        await self._write(_commit_watermark, observer, seq)

    async def forget(self, scope: str, observers: Iterable[str] = ()) -> Forgotten:
        """Erase everything of a scope for good, and total the observers' work that is left."""
        forgotten = await self._write(_forget, scope, list(observers))
        self.count -= forgotten.deleted.interactions
        return forgotten

    async def watermark(self, observer: str) -> int:
        """Every seq up to this one is done for the observer."""
        sql = "SELECT coalesce(max(seq), 0) FROM watermarks WHERE observer = ?"
        row = await self.read(lambda c: c.execute(sql, (observer,)).fetchone())
        return int(row[0])

    async def observer_totals(self, observer: str) -> ObserverStatus:
        return await self.read(_observer_totals, observer)

    async def known_mode(self, endpoint: str) -> str | None:
        """The structured-output mode `endpoint` accepted last time, if any."""
        sql = "SELECT mode FROM llm_modes WHERE endpoint = ?"
        row = await self.read(lambda c: c.execute(sql, (endpoint,)).fetchone())
        return None if row is None else str(row[0])

    async def remember_mode(self, endpoint: str, mode: str) -> None:
        """Keep the mode `endpoint` accepts, for the next start."""
        await self._write(_remember_mode, endpoint, mode)

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
