"""Ingest: a request body becomes checked, scrubbed interactions, admitted against the backlog
and committed to the log together with the pushes queued beside it."""

from __future__ import annotations

from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "Ingest": "pipeline",
    "read_body": "pipeline",
}
__all__ = [
    "Ingest",
    "read_body",
]
__getattr__ = lazy_surface(__name__, _SURFACE)
