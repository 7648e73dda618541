"""Recall: search and context latency through the socket as the store grows, beside bare FTS5."""

from __future__ import annotations

import random
import sqlite3
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlencode

from bench.corpus import PLACES, SEED, TOPICS
from bench.report import Goal, Row
from bench.runner import Client, index_ready, running
from bench.sizes import RECALL_MILLION, Context
from bench.stores import BARE, SCOPES, bare_turn_index, build_facts, cached, directory_mb
from forged.config import RecallConfig
from forged.models import MEMORY_TYPES
from forged.recall.fulltext import ranked
from forged.recall.query import SearchQuery, fts_query, julian_now, query_phrases
from tests.support.oracles import exact_ids

WARM_UP = 10  # queries sent before timing, so the first page reads are not counted
LIMIT = 10  # results per search
BUDGET = 1000  # tokens per context block
NO_LLM = "http://127.0.0.1:9/v1"  # distillation is off: only recall is asked
ONE_TENTH = Goal(0.1, at_least=False)  # p99 against bare FTS5, at a million of each
NO_WORSE = Goal(1.0, at_least=False)  # p99 through the turn index against it off, at a million


def _queries(n: int) -> list[tuple[str, str]]:
    """Two words a user would search for, and the scope to search in."""
    rng = random.Random(SEED)
    return [
        (f"{rng.choice(TOPICS)} {rng.choice(PLACES)}", f"user:{rng.randrange(SCOPES)}")
        for _ in range(n)
    ]


def _stats(samples: list[float]) -> tuple[float, float]:
    """Median and 99th percentile, in milliseconds."""
    ms = sorted(s * 1000 for s in samples)
    return statistics.median(ms), ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]


async def _timed(
    queries: list[tuple[str, str]], ask: Callable[[str, str], Awaitable[object]]
) -> list[float]:
    for q, scope in queries[:WARM_UP]:
        await ask(q, scope)
    samples = []
    for q, scope in queries:
        started = time.perf_counter()
        await ask(q, scope)
        samples.append(time.perf_counter() - started)
    return samples


async def _bare(path: Path, queries: list[tuple[str, str]]) -> list[float]:
    """The same query words as one bare FTS5 query over every text of the store: the baseline."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    sql = f"SELECT rowid FROM {BARE} WHERE {BARE} MATCH ? ORDER BY rank LIMIT {LIMIT}"

    async def ask(q: str, scope: str) -> object:
        return conn.execute(sql, (fts_query(query_phrases(q)),)).fetchall()

    samples = await _timed(queries, ask)
    conn.close()
    return samples


def overlap(path: Path, queries: list[tuple[str, str]]) -> float:
    """The mean share of each type's top ten that the ranking without shortcut also has."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    half_life, now, shares = RecallConfig().half_life_days, julian_now(), []
    for q, scope in queries:
        query = SearchQuery(q, scope, LIMIT)
        for table in MEMORY_TYPES:
            exact = exact_ids(conn, table, query, half_life, now)
            found = {i.id for i in ranked(conn, table, query, half_life, now)}
            shares.append(len(found & set(exact)) / len(exact) if exact else 1.0)
    conn.close()
    return statistics.fmean(shares)


async def _through_socket(client: Client, queries: list[tuple[str, str]]) -> dict[str, list[float]]:
    q, scope = queries[0]
    if not (await client.get("/v1/search?" + urlencode({"q": q, "scope": scope})))["results"]:
        raise RuntimeError(f"recall: {q!r} in {scope} found nothing; the store is not indexed")

    async def ask_search(q: str, scope: str) -> object:
        return await client.get("/v1/search?" + urlencode({"q": q, "scope": scope, "limit": LIMIT}))

    async def ask_context(q: str, scope: str) -> object:
        query = urlencode({"q": q, "scope": scope, "budget_tokens": BUDGET})
        return await client.get("/v1/context?" + query)

    return {
        "search": await _timed(queries, ask_search),
        "context": await _timed(queries, ask_context),
    }


def _read_through(path: Path) -> None:
    """Read the store's file once: forged's queries, timed first, and the baseline's after
    them then both run from the page cache, not forged's from the disk."""
    with path.open("rb") as file:
        while file.read(1 << 24):
            pass


async def _with_index(ctx: Context, n: int, path: Path) -> tuple[dict[str, list[float]], float]:
    """Search and context through a daemon whose turn index is built afresh from the store at
    start (not cached: its time is a figure), timed once it holds every turn; and that time."""
    index = {"path": str(ctx.work / f"recall-{n}-index")}
    async with running(
        ctx.work / f"recall-{n}", NO_LLM, store={"path": str(path)}, distill={"enabled": False},
        index=index,
    ) as daemon:  # fmt: skip
        client = await daemon.client()
        started = time.perf_counter()
        await index_ready(client)
        built = time.perf_counter() - started
        timed = await _through_socket(client, _queries(ctx.size.recall_queries))
        await client.aclose()
    return timed, built


async def _without_index(ctx: Context, n: int, path: Path) -> dict[str, list[float]]:
    """The same through a daemon with the turn index off: recall as it was before it."""
    async with running(
        ctx.work / f"recall-{n}-off", NO_LLM, store={"path": str(path)},
        distill={"enabled": False}, index={"enabled": False},
    ) as daemon:  # fmt: skip
        client = await daemon.client()
        timed = await _through_socket(client, _queries(ctx.size.recall_queries))
        await client.aclose()
    return timed


def _index_rows(
    ctx: Context, n: int, path: Path, built: float, timed: dict[str, dict[str, list[float]]]
) -> list[Row]:
    """The turn index at this size: its build and size beside a bare FTS5 index of the same
    turns, and search and context through it beside the same with it off."""
    at = f"recall: {n:,} facts + {n:,} turns,"
    bare_s, bare_mb = bare_turn_index(path, ctx.work)
    fts = "a bare FTS5 index of the same turns"
    size = directory_mb(ctx.work / f"recall-{n}-index")
    rows = [
        Row(f"{at} turn index built from the store at start", built, "s", fts, bare_s),
        Row(f"{at} turn index size", size, "MB", fts, bare_mb),
    ]
    goal = NO_WORSE if n >= RECALL_MILLION else None
    for endpoint in ("search", "context"):
        rows.append(
            Row(
                f"{at} {endpoint} p99 through the turn index",
                _stats(timed["on"][endpoint])[1],
                "ms",
                "the same with the turn index off",
                _stats(timed["off"][endpoint])[1],
                goal=goal,
            )
        )
    return rows


async def _one_size(ctx: Context, n: int) -> list[Row]:
    store = cached(ctx.cache, f"recall-{n}", build_facts, n)
    path = Path(store.path)
    _read_through(path)
    queries = _queries(ctx.size.recall_queries)
    on, built = await _with_index(ctx, n, path)
    off = await _without_index(ctx, n, path)
    (bare_median, bare_p99) = _stats(await _bare(path, queries))
    at = f"recall: {n:,} facts + {n:,} turns,"
    baseline = f"bare FTS5 MATCH, ORDER BY rank LIMIT {LIMIT}"
    goal = ONE_TENTH if n >= RECALL_MILLION else None
    rows = []
    for endpoint in ("search", "context"):
        median, p99 = _stats(on[endpoint])
        rows += [
            Row(f"{at} {endpoint} median", median, "ms", baseline, bare_median),
            Row(f"{at} {endpoint} p99", p99, "ms", baseline, bare_p99, goal=goal),
        ]
    share = overlap(path, queries)
    rows.append(Row(f"{at} top-10 overlap", share, "share", "ranking every match", 1.0))
    return rows + _index_rows(ctx, n, path, built, {"on": on, "off": off})


async def measure(ctx: Context) -> list[Row]:
    rows = []
    for n in ctx.size.recall_facts:
        rows += await _one_size(ctx, n)
    return rows
