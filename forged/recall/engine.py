"""Recall: search across the three types of memory and the context block, on SQLite or
PostgreSQL; each type ranked by `fulltext`, the lists fused (`fusion`), the block packed
(`packing`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

import msgspec

from forged.config import RecallConfig
from forged.models import (
    MEMORY_TYPES,
    ContextAnswer,
    FactAudit,
    FactsPage,
    MemoryItem,
    MemoryType,
    SummariesPage,
    Turn,
)
from forged.recall import listing
from forged.recall.fulltext import ranked, turn_text
from forged.recall.fusion import by_coverage, fused_top, plain
from forged.recall.listing import Page
from forged.recall.packing import FIRST_KEPT, kept_first, pack
from forged.recall.periods import periods
from forged.recall.query import SearchQuery, julian_now, kind_type
from forged.recall.relative_times import with_times_resolved
from forged.store.backend import Backend
from forged.text.tokens import estimate_tokens

KNOWN_LINE_TOKENS = 12  # a known fact's line beside its text: "[fact N] (kind, date) "
_SOURCES = """
    SELECT seq, session, timestamp, messages FROM interactions
    WHERE scope = ? AND seq BETWEEN ? AND ? ORDER BY seq
"""
_SAID = """
    SELECT seq, messages FROM interactions
    WHERE seq IN (SELECT value FROM json_each(?)) AND scope = ?
"""  # turns by seq, for the facts that may repeat them


def with_sources(conn: sqlite3.Connection, item: MemoryItem) -> MemoryItem:
    """A fact or summary with the interactions it was distilled from."""
    if item.type == "interaction":
        return item
    rows = conn.execute(_SOURCES, (item.scope, item.first_seq, item.last_seq)).fetchall()
    turns = [Turn(seq, session, at, *turn_text(messages)) for seq, session, at, messages in rows]
    return msgspec.structs.replace(item, sources=turns)


def searches(
    conn: sqlite3.Connection,
    query: SearchQuery,
    half_life_days: float,
    limits: list[int],
    now: float | None = None,
) -> list[list[MemoryItem]]:
    """The best items of one scope for each of `limits` (each type ranked by BM25 times recency
    decay, the lists merged by reciprocal rank fusion): each the answer of a search asking that
    many, from one ranking of each type (`query.limit` is at least the largest)."""
    now = julian_now() if now is None else now
    wanted = query.types if query.kind is None else (kind_type(query.kind),)
    types = [t for t in MEMORY_TYPES if t in wanted]

    full: dict[MemoryType, list[MemoryItem]] = {}

    def rank(table: MemoryType, depth: int) -> list[MemoryItem]:
        """A type's best `depth`: its best `query.limit`, ranked once (each ranking asks the
        index for every match, and fusion may read a list again, deeper)."""
        if table not in full:
            full[table] = ranked(conn, table, query, half_life_days, now)
        return full[table][:depth]

    def said(seqs: list[int]) -> dict[int, str]:
        rows = conn.execute(_SAID, (json.dumps(seqs), query.scope))
        return {seq: plain(turn_text(messages)[1]) for seq, messages in rows}

    return [fused_top(rank, types, limit, periods(query.q), said) for limit in limits]


def search(
    conn: sqlite3.Connection, query: SearchQuery, half_life_days: float, now: float | None = None
) -> list[MemoryItem]:
    """The best `query.limit` items of one scope, with their sources when asked."""
    (found,) = searches(conn, query, half_life_days, [query.limit], now)
    if query.sources:
        found = [with_sources(conn, i) for i in found]
    return found


class Recall:
    """Recall over a store, with the configured decay, limits and budget."""

    def __init__(self, store: Backend, config: RecallConfig) -> None:
        self.store = store
        self.config = config
        self._search: Callable[..., list[MemoryItem]] = search
        self._searches: Callable[..., list[list[MemoryItem]]] = searches
        self._facts: Callable[..., FactsPage] = listing.list_facts
        self._summaries: Callable[..., SummariesPage] = listing.list_summaries
        if store.backend == "postgresql":
            from forged.recall import (
                postgres as pgrecall,  # the same answers, from tsvector and GIN
            )

            self._search, self._searches = pgrecall.search, pgrecall.searches
            self._facts, self._summaries = pgrecall.list_facts, pgrecall.list_summaries

    async def search(self, query: SearchQuery, *, client: bool = True) -> list[MemoryItem]:
        """The query's best items; a `client`'s read is stopped after `query_timeout_ms`."""
        budget = self._budget() if client else None
        return await self.store.read(
            self._search, query, self.config.half_life_days, scope=query.scope, budget=budget
        )

    async def context(self, query: SearchQuery, budget_tokens: int) -> ContextAnswer:
        """The best candidates (up to `max_limit`), their relative times resolved, packed into
        the budget: search's first few first when they fit, then by coverage of the question."""
        candidates = msgspec.structs.replace(query, limit=self.config.max_limit)
        limits = [self.config.max_limit, self.config.default_limit]
        found, shown = await self.store.read(
            self._searches,
            candidates,
            self.config.half_life_days,
            limits,
            scope=query.scope,
            budget=self._budget(),
        )
        found = [with_times_resolved(i) for i in found]
        first = [with_times_resolved(i) for i in shown[:FIRST_KEPT]]
        return pack(kept_first(first, by_coverage(found, query.q), budget_tokens), budget_tokens)

    def _budget(self) -> float:
        return self.config.query_timeout_ms / 1000

    async def related(self, scope: str, text: str, budget_tokens: int) -> list[MemoryItem]:
        """The scope's current facts that recall finds for `text`, best first, while they fit
        `budget_tokens`: what a distiller is shown beside a transcript. Near-duplicates stay
        (unlike in a context block): a new state must be able to replace every one of them.
        Every word of the transcript is searched, function words too: a new state often shares
        no other word with the one it replaces ("We moved to Berlin", "They live in Lisbon")."""
        query = SearchQuery(
            q=text, scope=scope, limit=self.config.max_limit, types=("fact",), function_words=True
        )
        shown, used = [], 0
        for fact in await self.search(query, client=False):  # the observer's: never stopped
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
