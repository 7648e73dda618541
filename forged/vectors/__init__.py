"""Recall by meaning: the embedding model, vectors as the store keeps them, and the index that
scores them against a query."""

from __future__ import annotations

from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "CODE_WORDS": "codec",
    "Embedder": "model",
    "EmbedderUnavailable": "model",
    "decode": "codec",
    "encode": "codec",
    "sign_codes": "codec",
}
__all__ = [
    "CODE_WORDS",
    "Embedder",
    "EmbedderUnavailable",
    "decode",
    "encode",
    "sign_codes",
]
__getattr__ = lazy_surface(__name__, _SURFACE)
