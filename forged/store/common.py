"""What both stores do alike, written once: a batch's results, consolidation, forget, watermarks,
totals and dead letters, in portable SQL (forged.store.portable) around a few hooks a backend fills in.

A backend (`store.sqlite.Store` for SQLite, `store.postgres.PostgresStore`) supplies its connections
(`_write`, `read`), its write transaction (`_transaction`), how it appends to and reads the log,
and where many daemons need them, its fences and locks (`_fence`, `_lock_scope`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import msgspec

from forged.errors import InvalidRequest
from forged.models import (
    MAX_TOTAL,
    ConsolidationChange,
    ConsolidationRun,
    Correction,
    DeadLetterInfo,
    Deleted,
    Erased,
    Fact,
    FactAudit,
    Message,
    NewFact,
    ObserverStatus,
    StoredInteraction,
    normalise,
    stored_count,
)
from forged.store import edits, retire
from forged.store.audit import fact_audit
from forged.store.portable import keyed, portable
from forged.store.records import (
    BatchOutcome,
    Forgotten,
    NewInteraction,
    OpenDeadLetter,
    ScopeResult,
    VectorBatch,
)
from forged.timestamps import now

__all__ = [
    "LAST_SEQ",
    "MAX_READ_BYTES",
    "RAW_EXCERPT_CHARS",
    "SCOPE_TABLES",
    "SqlStore",
    "fitting",
    "new_rows",
    "read_log",
    "row_to_interaction",
]

T = TypeVar("T")

RAW_EXCERPT_CHARS = 500  # how much of a dead letter's raw answer a listing shows
LAST_SEQ = 2**63 - 1  # the end of every seq range
_MESSAGES = msgspec.json.Decoder(list[Message])
_REVIVED = "excluded.first_at > facts.invalid_at"  # said again after it stopped being true
_INSERT_FACT = f"""
    INSERT INTO facts (kind, text, norm, scope, session, batch_id, first_seq, last_seq,
                       first_at, last_at, created_at, last_seen_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (scope, kind, {{norm}}) DO UPDATE SET
        seen_count = facts.seen_count + 1,
        last_seen_at = excluded.last_seen_at,
        last_seq = greatest(facts.last_seq, excluded.last_seq),
        first_at = CASE WHEN {_REVIVED} THEN excluded.first_at
                        ELSE least(facts.first_at, excluded.first_at) END,
        last_at = greatest(facts.last_at, excluded.last_at),
        invalid_at = CASE WHEN {_REVIVED} THEN NULL ELSE facts.invalid_at END,
        superseded_by = CASE WHEN {_REVIVED} THEN NULL ELSE facts.superseded_by END,
        superseded_reason = CASE WHEN {_REVIVED} THEN NULL ELSE facts.superseded_reason END
"""  # {norm}: the normalised text as the store's unique index holds it (`keyed`)
_INSERT_SUMMARY = """
    INSERT INTO summaries (observer, batch_id, scope, session, text, first_seq, last_seq,
                           first_at, last_at, created_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id
"""
_INSERT_DEAD_LETTER = """
    INSERT INTO dead_letters (observer, scope, seq, reason, raw, created_at)
    SELECT ?, scope, seq, ?, ?, ? FROM interactions WHERE seq = ?
"""
_INSERT_RUN = """
    INSERT INTO distill_runs (observer, batch_id, model, scope, interactions, first_seq, last_seq,
        llm_calls, prompt_tokens, completion_tokens, ms, outcome, error, created_at, ungrounded)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_SPAN = """
    SELECT min(timestamp), max(timestamp) FROM interactions
    WHERE scope = ? AND seq BETWEEN ? AND ?
"""
_SET_WATERMARK = """
    INSERT INTO watermarks VALUES (?, ?)
    ON CONFLICT (observer) DO UPDATE SET seq = greatest(watermarks.seq, excluded.seq)
"""
_TOTALS = """
    SELECT count(DISTINCT batch_id), coalesce(sum(llm_calls), 0),
           coalesce(sum(CAST(prompt_tokens AS DOUBLE PRECISION)), 0),
           coalesce(sum(CAST(completion_tokens AS DOUBLE PRECISION)), 0),
           coalesce(sum(CAST(ms AS DOUBLE PRECISION)), 0), max(created_at),
           coalesce(sum(ungrounded), 0),
           (SELECT count(*) FROM dead_letters WHERE observer = :o AND resolved_at IS NULL),
           (SELECT coalesce(max(seq), 0) FROM watermarks WHERE observer = :o)
    FROM (SELECT batch_id, llm_calls, prompt_tokens, completion_tokens, ms, created_at, ungrounded
          FROM distill_runs WHERE observer = :o
          UNION ALL
          SELECT run_id, llm_calls, prompt_tokens, completion_tokens, ms, created_at, ungrounded
          FROM consolidation_runs WHERE observer = :o) AS runs
"""  # a consolidation run counts as a batch; token sums in floating point never overflow
_OPEN_DEAD_LETTERS = """
    SELECT d.id, d.seq, d.reason, d.raw, d.created_at,
           i.seq, i.scope, i.session, i.timestamp, i.tokens, i.messages
    FROM dead_letters d JOIN interactions i ON i.scope = d.scope AND i.seq = d.seq
    WHERE d.observer = ? AND d.resolved_at IS NULL AND d.seq BETWEEN ? AND ?
    ORDER BY d.seq, d.id
"""
_ANY_FACT = "SELECT 1 FROM facts WHERE scope = ? LIMIT 1"
# A vector is stored only while its item is: one deleted meanwhile leaves nothing behind.
_INSERT_VECTOR = {
    item: f"""INSERT INTO vectors (item, item_id, scope, vector)
        SELECT '{item}', {key}, scope, ? FROM {table} WHERE {key} = ?
        ON CONFLICT (item, item_id) DO NOTHING"""
    for item, table, key in (
        ("interaction", "interactions", "seq"),
        ("fact", "facts", "id"),
        ("summary", "summaries", "id"),
    )
}
_EMBED_PROGRESS = """
    INSERT INTO embed_progress VALUES (?, ?, ?) ON CONFLICT (observer, item)
    DO UPDATE SET last_id = greatest(embed_progress.last_id, excluded.last_id)
"""
# Bytes of stored messages one read of the log or page of turns returns at most (its first
# turn whatever its size): 2,000 turns of 16 MB a read would take 32 GB of memory to decode.
MAX_READ_BYTES = 32 * 1024 * 1024
# The sizes first: neither store reads a long blob to give its length.
_LOG_SIZES = "SELECT seq, length(messages) FROM interactions WHERE seq > ? ORDER BY seq LIMIT ?"
_READ_LOG = """
    SELECT seq, scope, session, timestamp, tokens, messages FROM interactions
    WHERE seq > ? AND seq <= ? ORDER BY seq
"""
# Every table holding a scope's rows, each with the scope in a column: forgetting deletes them
# all, and a distributed PostgreSQL keeps each delete on one shard. A new table of per-scope rows
# is one more line.
SCOPE_TABLES = (
    "dead_letters",
    "distill_runs",
    "interactions",
    "summaries",
    "facts",
    "consolidation_changes",
    "consolidation_runs",
    "consolidation_progress",
    "edits",
)
_EDITED = {"fact": "facts", "summary": "summaries", "interaction": "interactions"}
_KEY = {"facts": "id", "summaries": "id", "interactions": "seq"}


def read_log(conn: Any, after: int, limit: int) -> list[StoredInteraction]:
    """Up to `limit` interactions with seq greater than `after`, in seq order, as many as
    `fitting` lets one read return; none only when the log holds none past `after` (a feeder
    then passes the log's end)."""
    sql = portable(conn)
    while sizes := sql.execute(_LOG_SIZES, (after, limit)).fetchall():
        last = sizes[fitting(size for _, size in sizes) - 1][0]
        if rows := [row_to_interaction(r) for r in sql.execute(_READ_LOG, (after, last))]:
            return rows
        # each turn sized was erased before it was read (two statements, two states): the
        # turns past them are still to read, and a feeder given none passed them for good
        after = last
    return []


def fitting(sizes: Iterable[int]) -> int:
    """How many rows of these sizes of messages, in order, one read returns: those within
    MAX_READ_BYTES in all, and at least one."""
    held = count = 0
    for size in sizes:
        held += size
        if held > MAX_READ_BYTES and count:
            break
        count += 1
    return count


def row_to_interaction(row: tuple[Any, ...]) -> StoredInteraction:
    seq, scope, session, timestamp, tokens, messages = row
    return StoredInteraction(seq, scope, session, timestamp, tokens, _MESSAGES.decode(messages))


def new_rows(
    requests: list[list[NewInteraction]],
    stored: Callable[[list[tuple[str, str]]], Iterable[tuple[str, str]]],
) -> tuple[list[tuple[Any, ...]], list[int]]:
    """The rows to insert, in order, and how many each request adds.

    A client id is unique within its scope: an interaction whose (scope, id) is already stored
    (`stored` tells which of some keys are), or came earlier in the group (in the same request
    or another), is a duplicate. The same id in another scope is another interaction.
    """
    keys = [(i.scope, i.client_id) for r in requests for i in r if i.client_id is not None]
    seen: set[tuple[str, str]] = set()
    if keys:
        seen.update((scope, client_id) for scope, client_id in stored(keys))
    rows: list[tuple[Any, ...]] = []
    accepted = []
    for request in requests:
        before = len(rows)
        for item in request:
            if item.client_id is not None:
                if (key := (item.scope, item.client_id)) in seen:
                    continue
                seen.add(key)
            rows.append(msgspec.structs.astuple(item))
        accepted.append(len(rows) - before)
    return rows, accepted


def _span(sql: Any, scope: str, first_seq: int, last_seq: int) -> tuple[str, str]:
    """When the interactions a result comes from happened: their first and last timestamps."""
    first_at, last_at = sql.execute(_SPAN, (scope, first_seq, last_seq)).fetchone()
    if first_at is None:  # no source left to date it by: it can only be dated by now
        first_at = last_at = now()
    return first_at, last_at


def _fact_row(sql: Any, r: ScopeResult, f: Fact, created: str) -> tuple[Any, ...]:
    """A fact's row, dated by the interactions it names as sources (else by its whole batch)."""
    first_seq, last_seq = min(f.sources, default=r.first_seq), max(f.sources, default=r.last_seq)
    first_at, last_at = _span(sql, r.scope, first_seq, last_seq)
    session = r.session if f.session is None else f.session
    return (
        f.kind,
        f.text,
        normalise(f.text),
        r.scope,
        session,
        r.batch_id,
        first_seq,
        last_seq,
        first_at,
        last_at,
        created,
        created,
    )


def _logged(sql: Any, seq: int) -> bool:
    return sql.execute("SELECT 1 FROM interactions WHERE seq = ?", (seq,)).fetchone() is not None


def _any_logged(sql: Any, scope: str, first_seq: int, last_seq: int) -> bool:
    return (
        sql.execute(
            "SELECT 1 FROM interactions WHERE scope = ? AND seq BETWEEN ? AND ? LIMIT 1",
            (scope, first_seq, last_seq),
        ).fetchone()
        is not None
    )


def _without_erased(sql: Any, r: ScopeResult) -> ScopeResult | None:
    """A scope's result without what rests on interactions deleted while it was distilled.

    The summary was written from every turn, the deleted ones too: it goes. A fact keeps the
    sources still logged and goes when none is; one naming no sources came from the whole
    batch, deleted turns included, and goes too. None when nothing is left.
    """
    erased = edits.erased_seqs(sql, r.scope, r.first_seq, r.last_seq)
    if not erased:
        return r
    facts = [
        msgspec.structs.replace(f, sources=[s for s in f.sources if s not in erased])
        for f in r.facts
        if set(f.sources) - erased
    ]
    return msgspec.structs.replace(r, summary="", facts=facts) if facts else None


def _still_logged(sql: Any, outcome: BatchOutcome) -> BatchOutcome:
    """The part of a batch whose interactions are still in the log.

    A scope forgotten while its interactions were with an observer must not come back with
    the answer: forgetting erases every seq of the scope up to its last one, so a scope's
    results and runs with none of their seqs left were forgotten, all of them. An interaction
    deleted on its own takes back what rests on it (`_without_erased`).
    """
    results = [
        _without_erased(sql, r)
        for r in outcome.results
        if _any_logged(sql, r.scope, r.first_seq, r.last_seq)
    ]
    return msgspec.structs.replace(
        outcome,
        results=[r for r in results if r is not None],
        dead_letters=[d for d in outcome.dead_letters if _logged(sql, d.seq)],
        runs=[r for r in outcome.runs if _any_logged(sql, r.scope, r.first_seq, r.last_seq)],
    )


def _not_deleted(sql: Any, r: ScopeResult) -> list[Fact]:
    """A result's facts but those a user deleted after the log held all their sources."""
    deleted = edits.deleted_digests(sql, r.scope)
    return [
        f
        for f in r.facts
        if deleted.get(edits.digest(normalise(f.text)), 0) < max(f.sources, default=r.last_seq)
    ]


def _resolving(sql: Any, outcome: BatchOutcome, created: str) -> tuple[BatchOutcome, list[int]]:
    """Resolve the dead letters a re-run distilled; the re-run without the results and runs of
    those another re-run resolved first (two daemons re-running one letter of a shared store
    wrote two sets of results), and the letters it resolved."""
    update = "UPDATE dead_letters SET resolved_at = ? WHERE id = ? AND resolved_at IS NULL"
    resolved = [
        i for i in outcome.resolved_dead_letters if sql.execute(update, (created, i)).rowcount
    ]
    if not (taken := sorted(set(outcome.resolved_dead_letters) - set(resolved))):
        return outcome, resolved
    marks = ", ".join("?" * len(taken))
    query = f"SELECT seq FROM dead_letters WHERE id IN ({marks})"
    done = {int(seq) for (seq,) in sql.execute(query, taken).fetchall()}
    outcome = msgspec.structs.replace(
        outcome,
        results=[r for r in outcome.results if r.first_seq not in done],
        runs=[r for r in outcome.runs if r.first_seq not in done],
    )
    return outcome, resolved


def _write_results(sql: Any, observer: str, outcome: BatchOutcome, created: str) -> None:
    for r in outcome.results:
        first_at, last_at = _span(sql, r.scope, r.first_seq, r.last_seq)
        if r.summary:  # an extractive distiller writes none
            sql.execute(
                _INSERT_SUMMARY,
                (
                    observer,
                    r.batch_id,
                    r.scope,
                    r.session,
                    r.summary,
                    r.first_seq,
                    r.last_seq,
                    first_at,
                    last_at,
                    created,
                ),
            )
        r = msgspec.structs.replace(r, facts=_not_deleted(sql, r))
        insert = _INSERT_FACT.format(norm=keyed(sql, "norm"))
        sql.executemany(insert, [_fact_row(sql, r, f, created) for f in r.facts])
        retire.supersede_replaced(sql, observer, r, created)
    sql.executemany(
        _INSERT_DEAD_LETTER,
        [(observer, d.reason, d.raw, created, d.seq) for d in outcome.dead_letters],
    )
    sql.executemany(
        _INSERT_RUN,
        [
            (
                observer,
                r.batch_id,
                r.model,
                r.scope,
                r.interactions,
                r.first_seq,
                r.last_seq,
                r.usage.calls,
                stored_count(r.usage.prompt_tokens),
                stored_count(r.usage.completion_tokens),
                stored_count(r.usage.ms),
                r.outcome,
                r.error,
                created,
                r.ungrounded,
            )
            for r in outcome.runs
        ],
    )


def _observer_totals(conn: Any, observer: str) -> ObserverStatus:
    row = portable(conn).execute(_TOTALS, {"o": observer}).fetchone()
    batches, calls, prompt, completion, ms, last, ungrounded, dead, watermark = row
    prompt, completion, ms = (int(max(0, min(v, MAX_TOTAL))) for v in (prompt, completion, ms))
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


def _audit(sql: Any, fact_id: int) -> FactAudit:
    """The fact an edit wrote, with its trail, read in the edit's transaction: read after the
    commit, it could be what another client made of it since (deleted: the edit answered 500)."""
    audit = fact_audit(sql, fact_id)
    assert audit is not None  # the transaction wrote it, and holds it until its end
    return audit


class SqlStore:
    """The store methods both backends share; a backend adds its connections and its log."""

    backend: str  # "sqlite" or "postgresql", shown by /v1/status
    path: str  # the database file or URL
    count: int  # interactions in the log

    # The hooks a backend fills in.

    def _transaction(self, conn: Any) -> AbstractContextManager[Any]:
        """One write transaction on `conn`, rolled back whole on any error."""
        raise NotImplementedError

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(connection, *args)` in a thread, one writer at a time."""
        raise NotImplementedError

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(connection, *args)` in a thread."""
        raise NotImplementedError

    def _fence(self, conn: Any, observer: str) -> None:
        """Fail unless this daemon may still move `observer`'s watermark (it alone may here)."""

    def _lock_scope(self, conn: Any, scope: str) -> None:
        """Hold off, until the transaction ends, everyone else retiring facts of `scope`.

        SQLite's write transactions are one at a time already.
        """

    def _forgotten(self, conn: Any, scope: str) -> None:
        """After a forget that erased rows: what else the backend does to let them go."""

    # What both backends do alike.

    def _commit_batch(self, conn: Any, observer: str, outcome: BatchOutcome) -> BatchOutcome:
        sql, created = portable(conn), now()
        with self._transaction(conn):
            if outcome.watermark is not None:
                self._fence(conn, observer)
            replacing = {r.scope for r in outcome.results if any(f.replaces for f in r.facts)}
            for scope in sorted(replacing):  # always in one order: no two commits deadlock
                self._lock_scope(conn, scope)
            outcome = _still_logged(sql, outcome)
            outcome, resolved = _resolving(sql, outcome, created)
            _write_results(sql, observer, outcome, created)
            if outcome.watermark is not None:
                sql.execute(_SET_WATERMARK, (observer, outcome.watermark))
        return msgspec.structs.replace(outcome, resolved_dead_letters=resolved)

    async def commit_batch(self, observer: str, outcome: BatchOutcome) -> BatchOutcome:
        """Write a batch's results, dead letters, runs and watermark in one transaction.

        What belongs to interactions forgotten while the batch was with the observer is left
        out: forgetting must not be undone by an answer that arrives late. Returns what was
        written.
        """
        return await self._write(self._commit_batch, observer, outcome)

    def _commit_consolidation(
        self, conn: Any, observer: str, run: ConsolidationRun
    ) -> list[ConsolidationChange]:
        sql, created, u = portable(conn), now(), run.usage
        with self._transaction(conn):
            self._lock_scope(conn, run.scope)  # then every read below sees the last run's changes
            if not sql.execute(_ANY_FACT, (run.scope,)).fetchone():
                return []  # forgotten meanwhile
            applied = [
                c
                for c in run.changes
                if retire.apply(sql, observer, run.run_id, run.scope, c, created)
            ]
            applied += retire.condense(sql, observer, run, created)
            sql.execute(
                "INSERT INTO consolidation_runs (observer, run_id, model, scope, facts, changes,"
                " llm_calls, prompt_tokens, completion_tokens, ms, ungrounded, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    observer,
                    run.run_id,
                    run.model,
                    run.scope,
                    run.facts,
                    len(applied),
                    u.calls,
                    stored_count(u.prompt_tokens),
                    stored_count(u.completion_tokens),
                    stored_count(u.ms),
                    run.ungrounded,
                    created,
                ),
            )
            sql.execute(
                "INSERT INTO consolidation_progress VALUES (?, ?, ?, ?) ON CONFLICT (observer, scope)"
                " DO UPDATE SET fact_id = greatest(consolidation_progress.fact_id, excluded.fact_id),"
                " run_at = excluded.run_at",
                (observer, run.scope, run.through_fact_id, created),
            )
        return applied

    async def commit_consolidation(
        self, observer: str, run: ConsolidationRun
    ) -> list[ConsolidationChange]:
        """Apply a consolidation run with the scope's progress in one transaction; return the
        changes that applied (one whose facts changed or went meanwhile does not, and nothing
        is written for a scope forgotten meanwhile)."""
        return await self._write(self._commit_consolidation, observer, run)

    def _commit_vectors(self, conn: Any, observer: str, batch: VectorBatch) -> None:
        sql = portable(conn)
        with self._transaction(conn):
            self._fence(conn, observer)
            for item, insert in _INSERT_VECTOR.items():
                rows = [(v.vector, v.item_id) for v in batch.vectors if v.item == item]
                if rows:
                    sql.executemany(insert, rows)
            for item, last_id in batch.progress.items():
                sql.execute(_EMBED_PROGRESS, (observer, item, last_id))
            if batch.watermark is not None:
                sql.execute(_SET_WATERMARK, (observer, batch.watermark))

    async def commit_vectors(self, observer: str, batch: VectorBatch) -> None:
        """Store vectors with the observer's progress in one transaction (a vector whose item
        was deleted meanwhile is not stored)."""
        await self._write(self._commit_vectors, observer, batch)

    def _set_watermark(self, conn: Any, observer: str, seq: int) -> None:
        with self._transaction(conn):
            self._fence(conn, observer)
            portable(conn).execute(_SET_WATERMARK, (observer, seq))

    async def set_watermark(self, observer: str, seq: int) -> None:
        await self._write(self._set_watermark, observer, seq)

    def _scope_end(self, conn: Any, scope: str) -> int:
        """The scope's last seq (0: none), with no append in flight that may take a smaller one:
        on SQLite, this daemon's writer is the only one, and writes nothing meanwhile."""
        query = "SELECT coalesce(max(seq), 0) FROM interactions WHERE scope = ?"
        (through,) = portable(conn).execute(query, (scope,)).fetchone()
        return int(through)

    def _forget(self, conn: Any, scope: str, observers: list[str]) -> Forgotten:
        sql = portable(conn)
        through = self._scope_end(conn, scope)
        with self._transaction(conn):
            erased = {
                table: sql.execute(f"DELETE FROM {table} WHERE scope = ?", (scope,)).rowcount
                for table in SCOPE_TABLES
            }
            totals = {name: _observer_totals(conn, name) for name in observers}
        if any(erased.values()):
            self._forgotten(conn, scope)
        deleted = Deleted(erased["interactions"], erased["summaries"], erased["facts"])
        return Forgotten(deleted, through, totals)

    async def forget(self, scope: str, observers: Iterable[str] = ()) -> Forgotten:
        """Erase everything of a scope for good, and total the observers' work that is left."""
        forgotten = await self._write(self._forget, scope, list(observers))
        self.count -= forgotten.deleted.interactions
        return forgotten

    def _scope_of(self, conn: Any, item: str, item_id: int) -> str | None:
        table = _EDITED[item]
        row = (
            portable(conn)
            .execute(f"SELECT scope FROM {table} WHERE {_KEY[table]} = ?", (item_id,))
            .fetchone()
        )
        return None if row is None else str(row[0])

    def _edit(
        self,
        conn: Any,
        item: str,
        item_id: int,
        within: str | None,
        fn: Callable[..., T],
        *args: Any,
    ) -> T:
        """Run one edit of an item in a write transaction holding its scope's lock; with
        `within`, an item of another scope is as missing as one that is not there."""
        sql, created = portable(conn), now()
        with self._transaction(conn):
            scope = self._scope_of(conn, item, item_id)
            if scope is None or (within is not None and scope != within):
                where = "" if within is None else f" in scope {within!r}"
                raise InvalidRequest("not_found", f"no {item} with id {item_id}{where}")
            self._lock_scope(conn, scope)  # a consolidation commit waits, then sees it
            return fn(sql, *args, created)

    def _delete(self, conn: Any, item: str, item_id: int, within: str | None) -> tuple[str, Erased]:
        if item == "interaction":
            scope, edit, deleted = self._edit(
                conn, item, item_id, within, edits.delete_interaction, item_id
            )
        else:
            scope = self._scope_of(conn, item, item_id) or ""
            erase = edits.delete_fact if item == "fact" else edits.delete_summary
            edit, deleted = self._edit(conn, item, item_id, within, erase, item_id)
        self._forgotten(conn, scope)  # its text leaves the indexes and the free pages too
        return scope, Erased(edit, deleted)

    async def delete(
        self, item: str, item_id: int, within: str | None = None
    ) -> tuple[str, Erased]:
        """Erase one interaction (by seq), summary or fact (by id) for good; return its scope
        and what went. `InvalidRequest` 404 when there is none (in scope `within`)."""
        scope, erased = await self._write(self._delete, item, item_id, within)
        self.count -= erased.deleted.interactions
        return scope, erased

    def _correct_fact(
        self, conn: Any, fact_id: int, correction: Correction, within: str | None
    ) -> FactAudit:
        def corrected(sql: Any, created: str) -> FactAudit:
            return _audit(sql, edits.correct_fact(sql, fact_id, correction, created))

        return self._edit(conn, "fact", fact_id, within, corrected)

    async def correct_fact(
        self, fact_id: int, correction: Correction, within: str | None = None
    ) -> FactAudit:
        """Supersede a fact by the user's text (reason `user`); answer the new fact, audited."""
        return await self._write(self._correct_fact, fact_id, correction, within)

    def _add_fact(self, conn: Any, new: NewFact, at: str | None) -> FactAudit:
        sql, created = portable(conn), now()
        with self._transaction(conn):
            return _audit(sql, edits.add_fact(sql, new, at or created, created))

    async def add_fact(self, new: NewFact, at: str | None) -> FactAudit:
        """Write a fact by hand (`source` user), dated `at` or now; answer it, audited."""
        return await self._write(self._add_fact, new, at)

    def _pin_fact(self, conn: Any, fact_id: int, pinned: bool, within: str | None) -> FactAudit:
        def pinning(sql: Any, created: str) -> FactAudit:
            edits.pin_fact(sql, fact_id, pinned, created)
            return _audit(sql, fact_id)

        return self._edit(conn, "fact", fact_id, within, pinning)

    async def pin_fact(self, fact_id: int, pinned: bool, within: str | None = None) -> FactAudit:
        """Pin a fact (consolidation never retires it) or unpin it; answer it, audited."""
        return await self._write(self._pin_fact, fact_id, pinned, within)

    async def watermark(self, observer: str) -> int:
        """Every seq up to this one is done for the observer."""
        query = "SELECT coalesce(max(seq), 0) FROM watermarks WHERE observer = ?"
        row = await self.read(lambda c: portable(c).execute(query, (observer,)).fetchone())
        return int(row[0])

    async def observer_totals(self, observer: str) -> ObserverStatus:
        return await self.read(_observer_totals, observer)

    async def known_mode(self, endpoint: str) -> str | None:
        """The structured-output mode `endpoint` accepted last time, if any."""
        query = "SELECT mode FROM llm_modes WHERE endpoint = ?"
        row = await self.read(lambda c: portable(c).execute(query, (endpoint,)).fetchone())
        return None if row is None else str(row[0])

    def _remember_mode(self, conn: Any, endpoint: str, mode: str) -> None:
        with self._transaction(conn):
            portable(conn).execute(
                "INSERT INTO llm_modes VALUES (?, ?, ?) ON CONFLICT (endpoint)"
                " DO UPDATE SET mode = excluded.mode, learned_at = excluded.learned_at",
                (endpoint, mode, now()),
            )

    async def remember_mode(self, endpoint: str, mode: str) -> None:
        """Keep the mode `endpoint` accepts, for the next start."""
        await self._write(self._remember_mode, endpoint, mode)

    async def _dead_letter_rows(self, observer: str, first: int, last: int) -> list[Any]:
        return await self.read(
            lambda c: portable(c).execute(_OPEN_DEAD_LETTERS, (observer, first, last)).fetchall()
        )

    async def open_dead_letters(
        self, observer: str, first_seq: int = 0, last_seq: int = LAST_SEQ
    ) -> list[OpenDeadLetter]:
        """The observer's unresolved dead letters with seq in the range, with their interactions."""
        rows = await self._dead_letter_rows(observer, first_seq, last_seq)
        return [OpenDeadLetter(r[0], r[2], row_to_interaction(r[5:])) for r in rows]

    async def list_dead_letters(
        self, observer: str, first_seq: int = 0, last_seq: int = LAST_SEQ
    ) -> list[DeadLetterInfo]:
        """The observer's unresolved dead letters, for inspection."""
        rows = await self._dead_letter_rows(observer, first_seq, last_seq)
        return [
            DeadLetterInfo(
                id=r[0],
                seq=r[1],
                scope=r[6],
                reason=r[2],
                created_at=r[4],
                raw_excerpt=None if r[3] is None else r[3][:RAW_EXCERPT_CHARS],
            )
            for r in rows
        ]
