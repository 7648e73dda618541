"""Retiring memory in a store's transaction: a fact superseded or merged into another, older
summaries condensed into one; each change recorded in the consolidation audit trail.

Written once in portable SQL (forged.store.portable) for both stores; the caller holds the write
transaction (and, on PostgreSQL, the scope's lock).
"""

from __future__ import annotations

from typing import Any

from forged.models import ConsolidationChange, ConsolidationRun, normalise
from forged.store.edits import same_fact
from forged.store.records import ScopeResult

__all__ = ["apply", "condense", "supersede_replaced"]

_INSERT_CHANGE = """
    INSERT INTO consolidation_changes (observer, run_id, scope, action, fact_id, into_id, reason,
                                       created_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""
_SUPERSEDE = """
    UPDATE facts SET superseded_by = :into, superseded_reason = :reason,
        invalid_at = CASE WHEN :action = 'supersede'
                          THEN greatest(first_at, (SELECT first_at FROM facts WHERE id = :into))
                     END
    WHERE id = :fact AND id != :into AND scope = :scope AND superseded_by IS NULL AND pinned = 0
      AND EXISTS (SELECT 1 FROM facts AS n WHERE n.id = :into AND n.scope = :scope
                  AND n.superseded_by IS NULL
                  AND (:action = 'merge' OR n.first_at >= facts.first_at))
"""  # a fact changed, pinned or forgotten since it was read is left alone; none is replaced by an older
_ABSORB = """
    UPDATE facts SET (first_at, last_at, seen_count) =
        (SELECT least(k.first_at, d.first_at), greatest(k.last_at, d.last_at),
                k.seen_count + d.seen_count
         FROM facts AS k, facts AS d WHERE k.id = :into AND d.id = :fact)
    WHERE id = :into
"""  # the kept fact of a merge takes the duplicate's dates and count


def apply(
    sql: Any, observer: str, run_id: str, scope: str, c: ConsolidationChange, created: str
) -> bool:
    """Retire a fact into another and record why; False when the change no longer applies."""
    change = {
        "action": c.action,
        "fact": c.fact_id,
        "into": c.into_id,
        "reason": c.reason,
        "scope": scope,
    }
    if not sql.execute(_SUPERSEDE, change).rowcount:
        return False
    if c.action == "merge":
        sql.execute(_ABSORB, change)
    sql.execute(
        _INSERT_CHANGE, (observer, run_id, scope, c.action, c.fact_id, c.into_id, c.reason, created)
    )
    return True


def supersede_replaced(sql: Any, observer: str, r: ScopeResult, created: str) -> None:
    """Retire the known facts a batch's new facts replace, in the batch's transaction."""
    for f in r.facts:
        if not f.replaces:
            continue
        into = same_fact(sql, r.scope, f.kind, normalise(f.text))
        assert into is not None, "the batch's fact is written before what it replaces retires"
        reason = f"replaced by a newer {f.kind} when the batch was distilled"
        for old in f.replaces:
            apply(
                sql,
                observer,
                r.batch_id,
                r.scope,
                ConsolidationChange("supersede", old, into, reason),
                created,
            )


def condense(
    sql: Any, observer: str, run: ConsolidationRun, created: str
) -> list[ConsolidationChange]:
    """Write the condensed summary and point the ones it stands in for at it; nothing when
    any of them changed or went meanwhile."""
    if run.condensed is None:
        return []
    ids = run.condensed.summary_ids
    marks = ", ".join("?" * len(ids))
    (first_seq, last_seq, first_at, last_at, current) = sql.execute(
        f"SELECT min(first_seq), max(last_seq), min(first_at), max(last_at), count(*)"
        f" FROM summaries WHERE scope = ? AND condensed_into IS NULL AND id IN ({marks})",
        (run.scope, *ids),
    ).fetchone()
    if current != len(ids):
        return []
    (into,) = sql.execute(
        "INSERT INTO summaries (observer, batch_id, scope, text, first_seq, last_seq, first_at,"
        " last_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            observer,
            run.run_id,
            run.scope,
            run.condensed.text,
            first_seq,
            last_seq,
            first_at,
            last_at,
            created,
        ),
    ).fetchone()
    sql.execute(f"UPDATE summaries SET condensed_into = ? WHERE id IN ({marks})", (into, *ids))
    reason = f"condensed with {len(ids) - 1} other older summaries"
    changes = [ConsolidationChange("condense", old, into, reason) for old in ids]
    sql.executemany(
        _INSERT_CHANGE,
        [
            (observer, run.run_id, run.scope, c.action, c.fact_id, c.into_id, reason, created)
            for c in changes
        ],
    )
    return changes
