"""Recall: search and context latency through the socket as the store grows, and its floor."""

from __future__ import annotations

import random
import sqlite3
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlencode

from bench.corpus import PLACES, SEED, TOPICS
from bench.report import Row
from bench.runner import Client, running
from bench.sizes import Context
from bench.stores import SCOPES, build_facts, build_plain, size_mb
from forged.config import RecallConfig
from forged.recall import SearchQuery, pack, search

WARM_UP = 10  # queries sent before timing, so the first page reads are not counted
LIMIT = 10  # results per search
BUDGET = 1000  # tokens per context block
NO_LLM = "http://127.0.0.1:9/v1"  # distillation is off: only recall is asked


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


async def _in_process(path: Path, queries: list[tuple[str, str]]) -> dict[str, list[float]]:
    """The same searches and packing by forged's recall code on a bare connection: no daemon."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    half_life, max_limit = RecallConfig().half_life_days, RecallConfig().max_limit

    async def ask_search(q: str, scope: str) -> object:
        return search(conn, SearchQuery(q, scope, LIMIT), half_life)

    async def ask_context(q: str, scope: str) -> object:
        return pack(search(conn, SearchQuery(q, scope, max_limit), half_life), BUDGET)

    timed = {
        "search": await _timed(queries, ask_search),
        "context": await _timed(queries, ask_context),
    }
    conn.close()
    return timed


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


async def _one_size(ctx: Context, n: int) -> list[Row]:
    store, plain = ctx.work / f"facts-{n}.db", ctx.work / f"plain-{n}.db"
    started = time.perf_counter()
    build_facts(store, n)
    built = time.perf_counter() - started
    started = time.perf_counter()
    build_plain(plain, n)
    plain_s = time.perf_counter() - started
    queries = _queries(ctx.size.recall_queries)
    async with running(
        ctx.work / f"recall-{n}", NO_LLM, store={"path": str(store)}, distill={"enabled": False}
    ) as daemon:
        client = await daemon.client()
        timed = await _through_socket(client, queries)
        await client.aclose()
    bare = await _in_process(store, queries)
    at = f"recall: {n:,} facts,"
    baseline = "same query in-process, no daemon"
    rows = []
    for endpoint in ("search", "context"):
        (median, p99), (floor_median, floor_p99) = _stats(timed[endpoint]), _stats(bare[endpoint])
        rows += [
            Row(f"{at} {endpoint} median", median, "ms", baseline, floor_median),
            Row(f"{at} {endpoint} p99", p99, "ms", baseline, floor_p99),
        ]
    plain_table = "the same rows, plain table"
    rows += [
        Row(f"{at} time to build", built, "s", plain_table, plain_s),
        Row(f"{at} size on disk", size_mb(store), "MB", plain_table, size_mb(plain)),
    ]
    for path in (store, plain):
        for p in path.parent.glob(path.name + "*"):
            p.unlink()
    return rows


async def measure(ctx: Context) -> list[Row]:
    rows = []
    for n in ctx.size.recall_facts:
        rows += await _one_size(ctx, n)
    return rows
