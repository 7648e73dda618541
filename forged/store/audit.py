"""A fact with its audit trail (the facts it replaced, the change that retired it), read from
either store's connection: by recall's listing, and by an edit inside its own transaction, so
that what an edit answers is the state it wrote, not what another client made of it since."""

from __future__ import annotations

from typing import Any

import msgspec

from forged.models import FactAudit, FactChange, StoredFact
from forged.store.portable import portable
from forged.store.snapshot import one_state

__all__ = ["FACT_COLUMNS", "fact_audit", "stored_fact"]

FACT_COLUMNS = (  # a fact's row, in the order StoredFact takes it
    "id, kind, scope, session, text, created_at, last_seen_at, seen_count, first_seq, last_seq,"
    " batch_id, first_at, last_at, first_at, invalid_at, superseded_by, superseded_reason,"
    " source, pinned"
)
_TRAIL = """
    SELECT action, run_id, reason, created_at, {other} FROM consolidation_changes
    WHERE {this} = ? AND action != 'condense' ORDER BY id
"""  # a fact's changes, each with the fact on its other side


def stored_fact(row: tuple[Any, ...]) -> StoredFact:
    fact = StoredFact(*row)
    return msgspec.structs.replace(fact, pinned=bool(fact.pinned))  # an integer in both stores


def _fact(sql: Any, fact_id: int) -> StoredFact | None:
    row = sql.execute(f"SELECT {FACT_COLUMNS} FROM facts WHERE id = ?", (fact_id,)).fetchone()
    return None if row is None else stored_fact(row)


def _changes(sql: Any, fact_id: int, this: str, other: str) -> list[FactChange]:
    rows = sql.execute(_TRAIL.format(this=this, other=other), (fact_id,)).fetchall()
    return [
        FactChange(action, run, reason, at, fact)
        for action, run, reason, at, other_id in rows
        if (fact := _fact(sql, other_id)) is not None
    ]


def fact_audit(conn: Any, fact_id: int) -> FactAudit | None:
    """A fact with its audit trail: the facts it replaced and the change that retired it."""
    sql = portable(conn)
    with one_state(conn):  # a correction committed between the reads: a current fact retired
        fact = _fact(sql, fact_id)
        if fact is None:
            return None
        retired = _changes(sql, fact_id, "fact_id", "into_id")
        replaced = _changes(sql, fact_id, "into_id", "fact_id")
    return FactAudit(fact, replaced, retired[-1] if retired else None)
