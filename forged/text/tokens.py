"""Token estimates: cheap, model-independent, used for batch budgets and context packing."""

from __future__ import annotations

__all__ = ["CHARS_PER_TOKEN", "estimate_tokens"]

CHARS_PER_TOKEN = 4  # a common rule of thumb for English text with BPE tokenizers


def estimate_tokens(text: str) -> int:
    """Estimate how many tokens `text` costs a model (at least one)."""
    return len(text) // CHARS_PER_TOKEN + 1
