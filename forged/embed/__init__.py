"""The embed observer: vectors for recall by meaning, stored as turns, facts and summaries are."""

from __future__ import annotations

from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "EmbedObserver": "observer",
}
__all__ = [
    "EmbedObserver",
]
__getattr__ = lazy_surface(__name__, _SURFACE)
