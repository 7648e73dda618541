"""Everything a plugin is written against, in one import: observers, consolidation judges,
distillers, the types they receive and return, and the errors they may raise.

`from forged.plugin_api import ObserverContext, Feed, Progress, Batcher` and so on; docs/plugins.md
shows each kind of plugin whole. The names below are the plugin contract: they stay importable
from here whatever moves inside forged, and `tests/test_plugin_api.py` pins them.
"""

from __future__ import annotations

from typing import Protocol

from forged.config import DistillerConfig
from forged.consolidate.judgement import CurrentFact, ProposedChange, Proposer
from forged.errors import (
    ConfigError,
    ContextOverflow,
    DistillError,
    ForgedError,
    InvalidAnswer,
    LLMUnavailable,
)
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
from forged.observing.hub import Batcher, Feed
from forged.observing.plugins import ObserverContext, StoreView
from forged.recall.query import SearchQuery

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


class Observer(Protocol):
    """An observer plugin: a `name` and an async `run` that lives as long as the daemon."""

    name: str

    async def run(self, interactions: Feed, progress: Progress) -> None:
        """Receive interactions in seq order and commit progress; never return."""
        ...
