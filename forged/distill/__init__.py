"""Distilling: batches of interactions become summaries and typed facts, through the distill
observer, its dead letters and their re-run, or the model-free line picker."""

from __future__ import annotations

from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "BatchDistiller": "batches",
    "DistillObserver": "observer",
    "Redistiller": "deadletters",
    "Related": "batches",
}
__all__ = [
    "BatchDistiller",
    "DistillObserver",
    "Redistiller",
    "Related",
]
__getattr__ = lazy_surface(__name__, _SURFACE)
