"""Recall: search and the context block on SQLite (FTS5) or PostgreSQL (tsvector), their
ranking, fusion and packing, listings, and the dates a query names; read-only SQL."""

from __future__ import annotations

from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "CONTEXT_CLOSE": "packing",
    "CONTEXT_OPEN": "packing",
    "EDITS_MAX": "listing",
    "InteractionPage": "listing",
    "Meaning": "meaning",
    "PAGE_DEFAULT": "listing",
    "PAGE_MAX": "listing",
    "Page": "listing",
    "Recall": "engine",
    "SearchQuery": "query",
    "TurnIndexSource": "engine",
    "dropped_words": "query",
    "kind_type": "query",
    "listing": None,
    "one_line": "packing",
    "restates": "updates",
}
__all__ = [
    "CONTEXT_CLOSE",
    "CONTEXT_OPEN",
    "EDITS_MAX",
    "PAGE_DEFAULT",
    "PAGE_MAX",
    "InteractionPage",
    "Meaning",
    "Page",
    "Recall",
    "SearchQuery",
    "TurnIndexSource",
    "dropped_words",
    "kind_type",
    "listing",
    "one_line",
    "restates",
]
__getattr__ = lazy_surface(__name__, _SURFACE)
