"""Corrections in recall: what a user corrected never stands alone as if it were current.

A found turn, summary or retired fact that a fact the user corrected rests on (its seqs, or the
fact itself) is marked `corrected_by` the user's current fact, and that fact is put just ahead
of it, in every search and context block: the agent reads the correction first, then what was
said. The corrections are read from the edit trail (a few per scope, by index), never by
scanning the scope's facts.
"""

from __future__ import annotations

from typing import Any

import msgspec

from forged.models import MemoryItem
from forged.recall.fulltext import fact_items

__all__ = ["MAX_CHAIN", "with_corrections"]

MAX_CHAIN = 16  # corrections of corrections followed to the current one, at most
# The facts a user corrected in a scope, with the seqs they rest on and what replaced them.
_CORRECTED = """
    SELECT f.id, f.first_seq, f.last_seq, f.superseded_by
    FROM edits AS e JOIN facts AS f ON f.id = e.item_id
    WHERE e.scope = ? AND e.item = 'fact' AND e.action = 'correct'
      AND f.scope = ? AND f.superseded_reason = 'user'
"""
_SUCCESSOR = "SELECT superseded_by FROM facts WHERE id = ? AND scope = ?"


def _corrects(item: MemoryItem, old: tuple[int, int, int, int]) -> bool:
    """Whether the corrected fact `old` (id, first seq, last seq, successor) is the item or
    rests on what the item holds: a turn among its seqs, a summary sharing them."""
    old_id, first, last, _ = old
    if item.type == "fact":
        return item.id == old_id
    return first >= 1 and item.first_seq <= last and item.last_seq >= first


def _current(sql: Any, scope: str, fact_id: int) -> int:
    """The fact that stands for `fact_id` now: its successors followed to a current one."""
    for _ in range(MAX_CHAIN):
        row = sql.execute(_SUCCESSOR, (fact_id, scope)).fetchone()
        if row is None or row[0] is None:
            return fact_id
        fact_id = int(row[0])
    return fact_id


def _ordered(
    items: list[MemoryItem], fixes: dict[int, int], found: dict[int, MemoryItem]
) -> list[MemoryItem]:
    """The items, each corrected one marked and preceded by its correction (once, where first
    needed, at the score of what it corrects when that is higher)."""
    placed: dict[tuple[str, int], MemoryItem] = {}
    for item in items:
        fix = fixes.get(id(item))
        if fix is not None and fix in found and ("fact", fix) not in placed:
            correction = found[fix]
            placed["fact", fix] = msgspec.structs.replace(
                correction, score=max(correction.score, item.score)
            )
        if fix is not None and fix in found:
            item = msgspec.structs.replace(item, corrected_by=fix)
        placed.setdefault((item.type, item.id), item)
    return list(placed.values())


def with_corrections(
    sql: Any, scope: str, items: list[MemoryItem], limit: int | None = None
) -> list[MemoryItem]:
    """The items with the user's corrections put ahead of what they correct (at most `limit`
    in all: the last ones go, never a correction before what it corrects)."""
    if not items:
        return items
    rows = sql.execute(_CORRECTED, (scope, scope)).fetchall()
    corrected = [(int(a), int(b), int(c), int(d)) for a, b, c, d in rows]
    if not corrected:
        return items
    fixes: dict[int, int] = {}  # id(item) -> the old fact it is about, its correction later
    for item in items:
        old = next((c for c in corrected if _corrects(item, c)), None)
        if old is not None:
            fixes[id(item)] = old[0]
    if not fixes:
        return items
    current = {old: _current(sql, scope, old) for old in set(fixes.values())}
    fixes = {key: current[old] for key, old in fixes.items()}
    found = {f.id: f for f in fact_items(sql, sorted(set(fixes.values())))}
    out = _ordered(items, fixes, found)
    return out if limit is None else out[:limit]
