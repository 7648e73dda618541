"""Consolidation: a scope's current facts judged by a model (merge, supersede, keep), the
observer that runs it and its route's work, and the condensing of old summaries."""

from __future__ import annotations

from forged.consolidate.judgement import CurrentFact, ProposedChange, Proposer
from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "Asker": "observer",
    "ConsolidateObserver": "observer",
    "NAME": "observer",
}
__all__ = [
    "NAME",
    "Asker",
    "ConsolidateObserver",
    "CurrentFact",
    "ProposedChange",
    "Proposer",
]
__getattr__ = lazy_surface(__name__, _SURFACE)
