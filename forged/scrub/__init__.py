"""Secret scrubbing: the rules of both passes, the regex vocabulary and provider tables they
are written in, the one-scan prefilter, and the scan that redacts before anything is stored."""

from __future__ import annotations

from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "redacted": "scan",
    "scan": None,
    "scrub": "scan",
    "scrub_all": "scan",
    "secret_key_kind": "scan",
}
__all__ = [
    "redacted",
    "scan",
    "scrub",
    "scrub_all",
    "secret_key_kind",
]
__getattr__ = lazy_surface(__name__, _SURFACE)
