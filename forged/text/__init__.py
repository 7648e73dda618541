"""Deterministic measures of text shared by distilling and recall: token estimates, and the
grounding check that a distilled text says only what its sources say."""

from __future__ import annotations

from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "CHARS_PER_TOKEN": "tokens",
    "Claim": "grounding",
    "GENERIC": "grounding",
    "MONTHS": "grounding",
    "Offload": "offload",
    "STOPWORDS": "grounding",
    "SUBJECT_MIN_OVERLAP": "grounding",
    "Sources": "grounding",
    "Verdict": "grounding",
    "WEEKDAYS": "grounding",
    "WorkerProcess": "offload",
    "check": "grounding",
    "claim": "grounding",
    "estimate_tokens": "tokens",
    "sentences": "sentences",
    "stem": "grounding",
    "subject_share": "grounding",
}
__all__ = [
    "CHARS_PER_TOKEN",
    "GENERIC",
    "MONTHS",
    "STOPWORDS",
    "SUBJECT_MIN_OVERLAP",
    "WEEKDAYS",
    "Claim",
    "Offload",
    "Sources",
    "Verdict",
    "WorkerProcess",
    "check",
    "claim",
    "estimate_tokens",
    "sentences",
    "stem",
    "subject_share",
]
__getattr__ = lazy_surface(__name__, _SURFACE)
