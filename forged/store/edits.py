"""Per-item edits in a store's transaction: one interaction, summary or fact deleted, a fact
corrected, added by hand or pinned; each recorded in the edit trail (never with its text).

Written once in portable SQL (forged.store.portable) for both stores; the caller holds the write
transaction and, for what retires facts, the scope's lock. A missing or mismatched item is an
`InvalidRequest` here, so the API answers it as it is.
"""

from __future__ import annotations

import hashlib
from typing import Any

from forged.errors import InvalidRequest
from forged.models import Correction, Deleted, NewFact, normalise
from forged.store.portable import keyed

__all__ = [
    "USER",
    "add_fact",
    "correct_fact",
    "delete_fact",
    "delete_interaction",
    "delete_summary",
    "deleted_digests",
    "digest",
    "erased_seqs",
    "pin_fact",
    "record",
    "same_fact",
]

USER = "user"  # the source, observer and reason of what a person wrote
_INSERT_EDIT = """
    INSERT INTO edits (scope, action, item, item_id, into_id, digest, through_seq, created_at)
    SELECT ?, ?, ?, ?, ?, ?, coalesce(max(seq), 0), ? FROM interactions RETURNING id
"""
_INSERT_USER_FACT = """
    INSERT INTO facts (kind, text, norm, scope, session, batch_id, first_seq, last_seq, first_at,
                       last_at, created_at, last_seen_at, source, pinned)
    VALUES (?, ?, ?, ?, ?, 'user', 0, 0, ?, ?, ?, ?, 'user', ?) RETURNING id
"""  # seqs 0: no interaction is its source, so deleting one never takes it
_SOURCES_LEFT = """
    SELECT min(seq), max(seq), min(timestamp), max(timestamp) FROM interactions
    WHERE scope = ? AND seq BETWEEN ? AND ?
"""
_RESTING_ON = """
    SELECT id, first_seq, last_seq FROM {table}
    WHERE scope = ? AND first_seq <= ? AND last_seq >= ? ORDER BY id
"""  # the facts or summaries whose sources include a seq (a user's fact has none)


def digest(norm: str) -> str:
    """A deleted fact's normalised text as the trail keeps it: enough to refuse it again."""
    return hashlib.sha256(norm.encode()).hexdigest()


def record(
    sql: Any,
    scope: str,
    action: str,
    item: str,
    item_id: int,
    created: str,
    into_id: int | None = None,
    hashed: str | None = None,
) -> int:
    """Write one entry of the edit trail; return its id."""
    row = sql.execute(_INSERT_EDIT, (scope, action, item, item_id, into_id, hashed, created))
    return int(row.fetchone()[0])


def _missing(item: str, item_id: int) -> InvalidRequest:
    return InvalidRequest("not_found", f"no {item} with id {item_id}")


def _erase_fact(sql: Any, fact_id: int, scope: str, norm: str | None, created: str) -> None:
    """Delete a fact; what it retired stands again, and the trail forgets the changes. With its
    `norm`, the trail keeps its hash: a batch of what the log held then never writes it again."""
    sql.execute(
        "UPDATE facts SET superseded_by = NULL, superseded_reason = NULL, invalid_at ="
        " NULL WHERE superseded_by = ?",
        (fact_id,),
    )
    sql.execute(
        "DELETE FROM consolidation_changes WHERE action != 'condense'"
        " AND (fact_id = ? OR into_id = ?)",
        (fact_id, fact_id),
    )
    sql.execute("DELETE FROM facts WHERE id = ?", (fact_id,))
    hashed = None if norm is None else digest(norm)
    record(sql, scope, "delete", "fact", fact_id, created, hashed=hashed)


def _erase_summary(sql: Any, summary_id: int, scope: str, created: str) -> None:
    """Delete a summary; the ones it condensed stand again."""
    sql.execute(
        "UPDATE summaries SET condensed_into = NULL WHERE condensed_into = ?", (summary_id,)
    )
    sql.execute(
        "DELETE FROM consolidation_changes WHERE action = 'condense'"
        " AND (fact_id = ? OR into_id = ?)",
        (summary_id, summary_id),
    )
    sql.execute("DELETE FROM summaries WHERE id = ?", (summary_id,))
    record(sql, scope, "delete", "summary", summary_id, created)


def delete_fact(sql: Any, fact_id: int, created: str) -> tuple[int, Deleted]:
    row = sql.execute("SELECT scope, norm FROM facts WHERE id = ?", (fact_id,)).fetchone()
    if row is None:
        raise _missing("fact", fact_id)
    _erase_fact(sql, fact_id, row[0], row[1], created)
    return _last_edit(sql), Deleted(0, 0, 1)


def delete_summary(sql: Any, summary_id: int, created: str) -> tuple[int, Deleted]:
    row = sql.execute("SELECT scope FROM summaries WHERE id = ?", (summary_id,)).fetchone()
    if row is None:
        raise _missing("summary", summary_id)
    _erase_summary(sql, summary_id, row[0], created)
    return _last_edit(sql), Deleted(0, 1, 0)


def _last_edit(sql: Any) -> int:
    return int(sql.execute("SELECT max(id) FROM edits").fetchone()[0])


def _narrow(sql: Any, scope: str, seq: int, created: str) -> int:
    """After `seq` went: each fact resting on it rests on what is left of its sources, dated
    by them; one resting on nothing else goes too. Returns how many went."""
    gone = 0
    resting = sql.execute(_RESTING_ON.format(table="facts"), (scope, seq, seq)).fetchall()
    for fact_id, first_seq, last_seq in resting:
        low, high, first_at, last_at = sql.execute(
            _SOURCES_LEFT, (scope, first_seq, last_seq)
        ).fetchone()
        if low is None:  # its one source is gone: nothing can say it again
            _erase_fact(sql, fact_id, scope, None, created)
            gone += 1
        else:
            sql.execute(
                "UPDATE facts SET first_seq = ?, last_seq = ?, first_at = ?, last_at = ?"
                " WHERE id = ?",
                (low, high, first_at, last_at, fact_id),
            )
    return gone


def delete_interaction(sql: Any, seq: int, created: str) -> tuple[str, int, Deleted]:
    """Erase one interaction with its dead letters; the memory resting on it alone goes too.
    Returns its scope, the edit's id and what was deleted."""
    row = sql.execute("SELECT scope FROM interactions WHERE seq = ?", (seq,)).fetchone()
    if row is None:
        raise _missing("interaction", seq)
    scope = row[0]
    sql.execute("DELETE FROM interactions WHERE seq = ?", (seq,))
    sql.execute("DELETE FROM dead_letters WHERE scope = ? AND seq = ?", (scope, seq))
    edit = record(sql, scope, "delete", "interaction", seq, created)
    facts = _narrow(sql, scope, seq, created)
    told = sql.execute(_RESTING_ON.format(table="summaries"), (scope, seq, seq)).fetchall()
    for summary_id, _, _ in told:  # told from every turn of its batch: it may retell this one
        _erase_summary(sql, summary_id, scope, created)
    summaries = len(told)
    return scope, edit, Deleted(1, summaries, facts)


def same_fact(sql: Any, scope: str, kind: str, norm: str) -> int | None:
    """The id of the fact of a scope and kind with this normalised text, if there is one."""
    by_norm = f"{keyed(sql, 'norm')} = {keyed(sql, '?')}"  # through the unique index
    row = sql.execute(
        f"SELECT id FROM facts WHERE scope = ? AND kind = ? AND {by_norm}", (scope, kind, norm)
    ).fetchone()
    return None if row is None else int(row[0])


def _refuse_duplicate(sql: Any, scope: str, kind: str, norm: str) -> None:
    if (same := same_fact(sql, scope, kind, norm)) is not None:
        raise InvalidRequest(
            "duplicate_fact",
            f"fact {same} of scope {scope!r} already says"
            f" this as a {kind}; correct or pin that one",
        )


def add_fact(sql: Any, new: NewFact, at: str, created: str) -> int:
    """Write a fact a user gives, dated `at`; return its id."""
    norm = normalise(new.text)
    _refuse_duplicate(sql, new.scope, new.kind, norm)
    (fact_id,) = sql.execute(
        _INSERT_USER_FACT,
        (new.kind, new.text, norm, new.scope, new.session, at, at, created, created, 0),
    ).fetchone()
    record(sql, new.scope, "add", "fact", fact_id, created)
    return int(fact_id)


def _dated(old_first: str, old_last: str, at: str | None) -> tuple[str, str, str]:
    """A correction's first and last time and when the fact it replaces stops being true: it
    is about what the fact was about (its dates), or about `at` when the user gives one; the
    old fact is invalid from the correction's start, never before its own."""
    if at is None:
        return old_first, old_last, old_first
    return at, at, max(at, old_first)


def correct_fact(sql: Any, fact_id: int, correction: Correction, created: str) -> int:
    """Supersede a current fact with the text a user wrote (reason `user`, dated like the fact
    or by the correction's `at`, in the fact's audit trail); return the new fact's id. The trail keeps the old
    text's hash, as a delete does: a batch of what the log held then never revives it."""
    row = sql.execute(
        "SELECT scope, session, kind, superseded_by, pinned, norm, first_at, last_at"
        " FROM facts WHERE id = ?",
        (fact_id,),
    ).fetchone()
    if row is None:
        raise _missing("fact", fact_id)
    scope, session, kind, successor, pinned, old_norm, old_first, old_last = row
    if successor is not None:
        raise InvalidRequest(
            "fact_superseded",
            f"fact {fact_id} was replaced by fact {successor}; correct that one",
        )
    kind, norm = correction.kind or kind, normalise(correction.text)
    if norm == old_norm and kind == row[2]:
        raise InvalidRequest("invalid_body", "`text` says what the fact already says")
    _refuse_duplicate(sql, scope, kind, norm)
    first_at, last_at, invalid_at = _dated(old_first, old_last, correction.at)
    (into,) = sql.execute(
        _INSERT_USER_FACT,
        (kind, correction.text, norm, scope, session, first_at, last_at, created, created, pinned),
    ).fetchone()
    sql.execute(
        "UPDATE facts SET superseded_by = ?, superseded_reason = ?, invalid_at = ? WHERE id = ?",
        (into, USER, invalid_at, fact_id),
    )
    sql.execute(
        "INSERT INTO consolidation_changes (observer, run_id, scope, action, fact_id, into_id,"
        " reason, created_at) VALUES (?, ?, ?, 'supersede', ?, ?, ?, ?)",
        (USER, USER, scope, fact_id, into, USER, created),
    )
    record(sql, scope, "correct", "fact", fact_id, created, into_id=into, hashed=digest(old_norm))
    return int(into)


def pin_fact(sql: Any, fact_id: int, pinned: bool, created: str) -> None:
    row = sql.execute("SELECT scope FROM facts WHERE id = ?", (fact_id,)).fetchone()
    if row is None:
        raise _missing("fact", fact_id)
    sql.execute("UPDATE facts SET pinned = ? WHERE id = ?", (int(pinned), fact_id))
    record(sql, row[0], "pin" if pinned else "unpin", "fact", fact_id, created)


def erased_seqs(sql: Any, scope: str, first_seq: int, last_seq: int) -> set[int]:
    """The seqs of the scope's interactions deleted one by one within a range."""
    rows = sql.execute(
        "SELECT item_id FROM edits WHERE scope = ? AND item = 'interaction'"
        " AND action = 'delete' AND item_id BETWEEN ? AND ?",
        (scope, first_seq, last_seq),
    ).fetchall()
    return {int(r[0]) for r in rows}


def deleted_digests(sql: Any, scope: str) -> dict[str, int]:
    """The hashed texts of the scope's facts a user deleted or corrected, each with the log's
    last seq then: a batch of interactions up to it (in flight, or a dead letter re-run) does
    not write it again, nor revive it, whatever the turns' dates; a later conversation that
    says it again may."""
    rows = sql.execute(
        "SELECT digest, max(through_seq) FROM edits WHERE scope = ? AND item = 'fact'"
        " AND action IN ('delete', 'correct') AND digest IS NOT NULL GROUP BY digest",
        (scope,),
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}
