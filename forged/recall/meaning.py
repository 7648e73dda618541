"""The query side of recall by meaning: the index of stored vectors and a model for queries,
loaded in the background at start and asked under a time budget, off the event loop.

Whatever goes wrong here, recall goes on by words: no model (not installed, failed to load),
a query's vector not ready within `query_timeout_ms`, or a store not yet embedded all give no
vector, and search and context answer from the full-text indexes alone.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import structlog
import trio

from forged.config import EmbedConfig
from forged.recall.dense import DenseIndex
from forged.vectors.model import Embedder, EmbedderUnavailable

__all__ = ["Meaning"]

log = structlog.get_logger(__name__)


class Meaning:
    """The index and the query model recall by meaning uses."""

    def __init__(self, config: EmbedConfig) -> None:
        self.config = config
        self.index = DenseIndex()
        self._model: Embedder | None = None
        self._limiter = trio.CapacityLimiter(1)  # one query embedded at a time
        self.error: str | None = None  # why there is no model, once loading failed

    async def load(self) -> None:
        """Load the query model in a worker thread; on failure, say why and go on without."""
        try:
            self._model = await trio.to_thread.run_sync(Embedder, self.config.threads)
        except EmbedderUnavailable as exc:
            self.error = str(exc)
            log.error("query_embedder_unavailable", error=self.error)

    async def vector(self, text: str) -> npt.NDArray[np.float32] | None:
        """The query's vector, or None: no model, or not ready within the budget (the thread
        is left to finish; the next query waits for it within its own budget)."""
        model = self._model
        if model is None or not text.strip():
            return None
        with trio.move_on_after(self.config.query_timeout_ms / 1000):
            return await trio.to_thread.run_sync(
                model.query, text, limiter=self._limiter, abandon_on_cancel=True
            )
        log.warning("query_vector_late", budget_ms=self.config.query_timeout_ms)
        return None
