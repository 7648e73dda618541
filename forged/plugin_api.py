"""Everything a plugin is written against, in one import: observers, consolidation judges,
distillers, the types they receive and return, and the errors they may raise.

`from forged.plugin_api import ObserverContext, Feed, Progress, Batcher` and so on; docs/plugins.md
shows each kind of plugin whole. The names below are the plugin contract: they stay importable
from here whatever moves inside forged, and `tests/test_plugin_api.py` pins them. What only a
plugin sees is defined here (`Progress` as a plugin may use it, `ObserverContext`, `StoreView`);
the rest is forged's own, named here once more."""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

import structlog

from forged.config import DistillerConfig, RecallConfig
from forged.consolidate.judgement import CurrentFact, ProposedChange, Proposer
from forged.errors import (
    ConfigError,
    ContextOverflow,
    DistillError,
    ForgedError,
    InvalidAnswer,
    LLMUnavailable,
)
from forged.hub import Batcher, Feed, Observer
from forged.llm.distiller import Distiller
from forged.models import (
    DistilledMemory,
    Fact,
    FactsPage,
    MemoryItem,
    Message,
    StoredInteraction,
    SummariesPage,
)
from forged.recall.engine import Recall
from forged.recall.listing import Page
from forged.recall.query import SearchQuery
from forged.store.backend import Backend

__all__ = [
    "Batcher",
    "ConfigError",
    "ContextOverflow",
    "CurrentFact",
    "DistillError",
    "DistilledMemory",
    "Distiller",
    "DistillerConfig",
    "Fact",
    "FactsPage",
    "Feed",
    "ForgedError",
    "InvalidAnswer",
    "LLMUnavailable",
    "MemoryItem",
    "Message",
    "Observer",
    "ObserverContext",
    "Progress",
    "ProposedChange",
    "Proposer",
    "SearchQuery",
    "StoreView",
    "StoredInteraction",
    "SummariesPage",
]

C = TypeVar("C")  # the plugin's own `Config` Struct


class Progress(Protocol):
    """What an observer's `run` may do with its progress: commit a watermark (the rest of the
    daemon's progress object is the hub's own)."""

    @property
    def name(self) -> str:
        """The observer's name: its table's name in the config."""
        ...

    async def commit(self, seq: int) -> None:
        """Everything up to `seq` is done: the watermark moves there, durably."""
        ...


class StoreView:
    """What a plugin may read: the interaction log, watermarks and distilled memory; no writes."""

    def __init__(self, store: Backend, recall: RecallConfig) -> None:
        self._store = store
        self._recall = Recall(store, recall)

    @property
    def last_seq(self) -> int:
        """The seq of the newest stored interaction (0 when the log is empty)."""
        return int(self._store.last_seq)

    @property
    def count(self) -> int:
        """How many interactions the log holds."""
        return int(self._store.count)

    async def read_log(self, after: int, limit: int) -> list[StoredInteraction]:
        """Up to `limit` interactions with seq greater than `after`, in seq order."""
        return await self._store.read_log(after, limit)

    async def watermark(self, observer: str) -> int:
        """Every seq up to this one is done for `observer`."""
        return await self._store.watermark(observer)

    async def search(self, query: SearchQuery) -> list[MemoryItem]:
        """Facts and summaries ranked as `GET /v1/search` ranks them."""
        return await self._recall.search(query)

    async def facts(
        self, scope: str | None = None, kind: str | None = None, after: int = 0, limit: int = 100
    ) -> FactsPage:
        """A page of stored facts, oldest first, as `GET /v1/facts` pages them."""
        return await self._recall.facts(Page(scope, kind, after, limit))

    async def summaries(
        self, scope: str | None = None, after: int = 0, limit: int = 100
    ) -> SummariesPage:
        """A page of stored summaries, oldest first."""
        return await self._recall.summaries(Page(scope, None, after, limit))


class ObserverContext(Generic[C]):
    """What an observer plugin is created with."""

    def __init__(self, name: str, config: C, store: StoreView) -> None:
        self.name = name  # the table's name: the observer's watermark, status and log name
        self.config = config  # its table decoded into the plugin's `Config` (None without one)
        self.store = store
        self.log = structlog.get_logger(f"forged.observers.{name}").bind(observer=name)
