"""Recall: search across the three types of memory and the context block, on SQLite
(`sqlite`) or PostgreSQL (`postgres`); the lists fused (`fusion`), the block packed (`packing`)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any, Protocol

import msgspec
import structlog
import trio

from forged.config import RecallConfig
from forged.errors import QueryTimeout
from forged.index.turns import IndexView
from forged.models import (
    ContextAnswer,
    FactAudit,
    FactsPage,
    IndexStatus,
    MemoryItem,
    SummariesPage,
)
from forged.recall import listing, postgres, sqlite
from forged.recall.corrections import with_corrections
from forged.recall.dense import DenseQuery
from forged.recall.distinct import WIDER, one_per_turn
from forged.recall.fusion import by_coverage
from forged.recall.listing import Page
from forged.recall.meaning import Meaning
from forged.recall.packing import FIRST_KEPT, kept_first, pack
from forged.recall.passages import passage
from forged.recall.query import SearchQuery
from forged.recall.relative_times import with_times_resolved
from forged.recall.updates import newest_first
from forged.store.backend import Backend
from forged.store.portable import portable
from forged.text.tokens import estimate_tokens

__all__ = ["KNOWN_LINE_TOKENS", "Recall", "TurnIndexSource"]

log = structlog.get_logger(__name__)
KNOWN_LINE_TOKENS = 12  # a known fact's line beside its text: "[fact N] (kind, date) "


class TurnIndexSource(Protocol):
    """Where recall finds the turn index (forged.index.keeper): once it is up to date."""

    def usable(self, last_seq: int) -> IndexView | None: ...

    def status(self) -> IndexStatus: ...

    def rebuild(self) -> None: ...


class Recall:
    """Recall over a store, with the configured decay, limits and budget."""

    def __init__(
        self,
        store: Backend,
        config: RecallConfig,
        turns: TurnIndexSource | None = None,
        meaning: Meaning | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self._turns = turns
        self.meaning = meaning  # recall by meaning beside recall by words, when on
        self._search: Callable[..., list[MemoryItem]] = sqlite.search
        self._searches: Callable[..., list[list[MemoryItem]]] = sqlite.searches
        self._facts: Callable[..., FactsPage] = listing.list_facts
        self._summaries: Callable[..., SummariesPage] = listing.list_summaries
        if store.backend == "postgresql":  # the same answers, from tsvector and GIN
            self._search, self._searches = postgres.search, postgres.searches
            self._facts, self._summaries = postgres.list_facts, postgres.list_summaries

    async def search(self, query: SearchQuery, *, client: bool = True) -> list[MemoryItem]:
        """The query's best items; a `client`'s read is stopped after `query_timeout_ms`."""
        budget = self._budget() if client else None
        index, dense = self._index(), await self._dense(query)
        return await self.store.read(
            self._distinct, query, index, dense, scope=query.scope, budget=budget
        )

    def _distinct(
        self, conn: Any, query: SearchQuery, index: IndexView | None, dense: DenseQuery | None
    ) -> list[MemoryItem]:
        """Search's answer with one place per turn (forged.recall.distinct): read wider when
        it may hold both facts and turns."""
        if not _one_place_per_turn(query):
            return self._found(conn, query, index, dense)
        wide = msgspec.structs.replace(query, limit=query.limit * WIDER)
        return one_per_turn(self._found(conn, wide, index, dense), query.limit)

    async def _dense(self, query: SearchQuery) -> DenseQuery | None:
        """The search's side by meaning: None without a model or a vector in time."""
        if self.meaning is None:
            return None
        vector = await self.meaning.vector(query.q)
        return None if vector is None else DenseQuery(self.meaning.index, vector)

    def _index(self) -> IndexView | None:
        """The turn index, if there is one close enough behind the log (its tail is scored
        from the store: every turn acknowledged so far is searched)."""
        return None if self._turns is None else self._turns.usable(self.store.last_seq)

    def _found(
        self, conn: Any, query: SearchQuery, index: IndexView | None, dense: DenseQuery | None
    ) -> list[MemoryItem]:
        """Search's answer, in the reader's thread, with the user's corrections put ahead of
        what they correct (forged.recall.corrections)."""
        found = self._search(conn, query, self.config.half_life_days, index=index, dense=dense)
        return with_corrections(portable(conn), query.scope, found, query.limit)

    async def context(self, query: SearchQuery, budget_tokens: int) -> ContextAnswer:
        """The best candidates (up to `max_limit`), their relative times resolved, packed into
        the budget: search's first few first when they fit, then by coverage of the question;
        a newer fact restating an older one's subject goes before it (forged.recall.updates)."""
        candidates = msgspec.structs.replace(query, limit=self.config.max_limit)
        index, dense = self._index(), await self._dense(query)
        return await self.store.read(
            self._block,
            candidates,
            budget_tokens,
            index,
            dense,
            scope=query.scope,
            budget=self._budget(),
        )

    def _block(
        self,
        conn: Any,
        query: SearchQuery,
        budget_tokens: int,
        index: IndexView | None,
        dense: DenseQuery | None,
    ) -> ContextAnswer:
        """The block, read and packed in the reader's thread: weighing a hundred candidates
        against the question is work the event loop must not wait on."""
        limits = [self.config.max_limit, self.config.default_limit]
        found, shown = self._searches(
            conn, query, self.config.half_life_days, limits, index=index, dense=dense
        )
        sql = portable(conn)
        found, shown = ([passage(i, query.q) for i in items] for items in (found, shown))
        found = with_corrections(sql, query.scope, by_coverage(found, query.q))
        shown = with_corrections(sql, query.scope, shown)
        if _one_place_per_turn(query):  # the first few as search shows them
            shown = one_per_turn(shown, len(shown))
        found = [with_times_resolved(i) for i in found]
        first = [with_times_resolved(i) for i in shown[:FIRST_KEPT]]
        ordered = newest_first(kept_first(first, found, budget_tokens), query.q)
        return pack(ordered, budget_tokens)

    def _budget(self) -> float:
        return self.config.query_timeout_ms / 1000

    async def related(
        self, scope: str, text: str, budget_tokens: int, search_budget: float | None = None
    ) -> list[MemoryItem]:
        """The scope's current facts that recall finds for `text`, best first, while they fit
        `budget_tokens`: what a distiller is shown beside a transcript. Near-duplicates stay
        (unlike in a context block): a new state must be able to replace every one of them.
        Every word of the transcript is searched, function words too: a new state often shares
        no other word with the one it replaces ("We moved to Berlin", "They live in Lisbon").
        A search past `search_budget` seconds is stopped and none are shown: the turn is distilled
        without them rather than late (a scope of 40,000 facts held every other scope up). So is
        one still waiting for a reader after that long: clients flooding the scope queue ahead
        of it, and the observer must not wait behind them."""
        query = SearchQuery(
            q=text, scope=scope, limit=self.config.max_limit, types=("fact",), function_words=True
        )
        shown, used = [], 0
        found: list[MemoryItem] | None = None
        with trio.move_on_after(math.inf if search_budget is None else search_budget):
            with contextlib.suppress(QueryTimeout):
                found = await self.store.read(
                    self._found, query, None, None, scope=scope, budget=search_budget
                )
        if found is None:  # stopped, or still waiting for a reader
            log.warning(
                "related_facts_skipped", scope=scope, timeout_ms=round((search_budget or 0) * 1000)
            )
            return []
        for fact in found:
            cost = estimate_tokens(fact.text) + KNOWN_LINE_TOKENS
            if used + cost <= budget_tokens:
                shown.append(fact)
                used += cost
        return shown

    async def facts(self, page: Page) -> FactsPage:
        return await self.store.read(self._facts, page)

    async def summaries(self, page: Page) -> SummariesPage:
        return await self.store.read(self._summaries, page)

    async def fact(self, fact_id: int) -> FactAudit | None:
        return await self.store.read(listing.fact_audit, fact_id)


def _one_place_per_turn(query: SearchQuery) -> bool:
    """Whether the answer may hold a fact and its turn, of which search shows one."""
    return query.kind is None and {"fact", "interaction"} <= set(query.types)
