"""Index: the turns' full-text index beside the store (tantivy), derived from the log and
rebuilt from it at will, and the keeper that follows the log into it."""

from __future__ import annotations

from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "IndexKeeper": "keeper",
    "IndexStats": "turns",
    "IndexView": "turns",
    "Matches": "turns",
    "TurnIndex": "turns",
    "rounded_lengths": "turns",
    "terms": "turns",
}
__all__ = [
    "IndexKeeper",
    "IndexStats",
    "IndexView",
    "Matches",
    "TurnIndex",
    "rounded_lengths",
    "terms",
]
__getattr__ = lazy_surface(__name__, _SURFACE)
