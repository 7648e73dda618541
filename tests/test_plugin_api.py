"""The plugin contract: what `forged.plugin_api` exports, pinned, and each name usable as the
documented plugins use it."""

from __future__ import annotations

import inspect

import forged.plugin_api as api
from forged.observing import hub

EXPORTED = [
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


def test_the_exported_names_are_pinned() -> None:
    """A name added to or taken from the contract is a decision: this list changes with it."""
    assert sorted(api.__all__) == EXPORTED


def test_every_exported_name_is_defined() -> None:
    assert [n for n in api.__all__ if not hasattr(api, n)] == []


def test_the_hubs_progress_is_what_a_plugin_is_promised() -> None:
    """The progress object the hub hands an observer has what `Progress` promises, so a plugin
    typed against the contract runs on the daemon's own."""
    promised = {n for n, _ in inspect.getmembers(api.Progress) if not n.startswith("_")}
    assert promised == {"commit", "name"}
    assert promised <= set(dir(hub.Progress))
    assert inspect.iscoroutinefunction(hub.Progress.commit)
