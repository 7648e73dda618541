"""The plugin contract: what `forged.plugin_api` exports, pinned, and each name usable as the
documented plugins use it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import forged.plugin_api as api
from forged import hub

OWN = "forged.observers"  # a shipped observer may use its siblings
SHIPPED = sorted((Path(__file__).parents[1] / "forged" / "observers").glob("*.py"))

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


def _forged_imports(path: Path) -> set[str]:
    """The forged modules a source file imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] == "forged"}


def test_shipped_observers_import_the_contract_alone() -> None:
    """The observers forged ships are written as a plugin is: against `forged.plugin_api` (and
    each other) only."""
    own = {p.name: _forged_imports(p) for p in SHIPPED}
    assert "audit.py" in own
    beyond = {
        name: sorted(m for m in imports if m != "forged.plugin_api" and not m.startswith(OWN))
        for name, imports in own.items()
    }
    assert beyond == {name: [] for name in own}


def test_the_observer_shape_is_the_hubs() -> None:
    """One `Observer`: what a plugin is promised is what the hub runs."""
    assert api.Observer is hub.Observer
