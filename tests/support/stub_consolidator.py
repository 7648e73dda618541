"""Consolidation plugins for the tests, loaded by import path like any user's plugin."""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from forged.plugin_api import CurrentFact, ObserverContext, ProposedChange


class SamePrefixConfig(msgspec.Struct, frozen=True, kw_only=True):
    words: int = 3  # facts that start with the same words say the same thing's state


class SamePrefix:
    """No LLM: among facts starting with the same `words` words, the newest supersedes the rest."""

    Config = SamePrefixConfig
    asked: ClassVar[list[tuple[str, int]]] = []  # (scope, facts shown) per call

    def __init__(self, context: ObserverContext[SamePrefixConfig]) -> None:
        self.words = context.config.words

    async def propose(self, scope: str, facts: list[CurrentFact]) -> list[ProposedChange]:
        type(self).asked.append((scope, len(facts)))
        groups: dict[tuple[str, ...], list[CurrentFact]] = {}
        for fact in facts:
            groups.setdefault(tuple(fact.text.casefold().split()[: self.words]), []).append(fact)
        reason = f"same first {self.words} words, said later"
        changes = []
        for group in groups.values():
            newest = max(group, key=lambda f: (f.first_at, f.id))
            changes += [
                ProposedChange("supersede", f.id, newest.id, reason)
                for f in group
                if f is not newest
            ]
        return changes


class Backwards:
    """Proposes what forged must refuse: the newest fact superseded by the oldest."""

    def __init__(self, context: ObserverContext[None]) -> None:
        pass

    async def propose(self, scope: str, facts: list[CurrentFact]) -> list[ProposedChange]:
        oldest, newest = min(facts, key=lambda f: f.first_at), max(facts, key=lambda f: f.first_at)
        return [ProposedChange("supersede", newest.id, oldest.id, "backwards")]


class Garbled:
    """Answers with something that is not a list of changes."""

    def __init__(self, context: ObserverContext[None]) -> None:
        pass

    async def propose(self, scope: str, facts: list[CurrentFact]) -> Any:
        return [{"action": "merge"}]


class Blocking:
    """A `propose` that is not async."""

    def __init__(self, context: ObserverContext[None]) -> None:
        pass

    def propose(self, scope: str, facts: list[CurrentFact]) -> list[ProposedChange]:
        return []


class Broken:
    """Cannot start."""

    def __init__(self, context: ObserverContext[None]) -> None:
        raise RuntimeError("no judge model at /srv/judge")

    async def propose(self, scope: str, facts: list[CurrentFact]) -> list[ProposedChange]:
        return []
