"""Recall: search and context latency through the socket as the store grows, against bare FTS5."""

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

WARM_UP = 10  # queries sent before timing, so the first page reads are not counted
LIMIT = 10  # results per search
BUDGET = 1000  # tokens per context block
NO_LLM = "http://127.0.0.1:9/v1"  # distillation is off: only recall is asked
MISSING = "recall not available"
_BARE = [  # the same words in the same scope, ranked by BM25 alone, in facts and in summaries
    f"""SELECT t.id FROM {table}_fts JOIN {table} AS t ON t.id = {table}_fts.rowid
        WHERE {table}_fts MATCH ? AND t.scope = ? ORDER BY rank LIMIT ?"""
    for table in ("facts", "summaries")
]


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


def _bare(path: Path, queries: list[tuple[str, str]]) -> list[float] | None:
    """The same lookups straight on the file: FTS5 MATCH, BM25 rank, scope; no HTTP, no decay."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        conn.execute("SELECT 1 FROM facts_fts LIMIT 1")
    except sqlite3.OperationalError:
        return None  # no full-text index in this schema yet
    samples = []
    for i, (q, scope) in enumerate([*queries[:WARM_UP], *queries]):
        match = " OR ".join(f'"{w}"' for w in q.split())
        started = time.perf_counter()
        for sql in _BARE:
            conn.execute(sql, (match, scope, LIMIT)).fetchall()
        if i >= WARM_UP:
            samples.append(time.perf_counter() - started)
    conn.close()
    return samples


async def _through_socket(
    client: Client, queries: list[tuple[str, str]]
) -> dict[str, list[float]] | None:
    status, _ = await client.request(
        "GET", "/v1/search?" + urlencode({"q": "x", "scope": "user:0"})
    )
    if status == 404:
        return None
    found = await client.get(
        "/v1/search?" + urlencode({"q": queries[0][0], "scope": queries[0][1]})
    )
    if not found["results"]:
        raise RuntimeError(f"recall: {queries[0]} found nothing; the store was not indexed")
    search = await _timed(
        queries,
        lambda q, s: client.get("/v1/search?" + urlencode({"q": q, "scope": s, "limit": LIMIT})),
    )
    context = await _timed(
        queries,
        lambda q, s: client.get(
            "/v1/context?" + urlencode({"q": q, "scope": s, "budget_tokens": BUDGET})
        ),
    )
    return {"search": search, "context": context}


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
    bare = _bare(store, queries)
    at = f"recall: {n:,} facts,"
    baseline = "bare SQLite FTS5 query"
    rows = []
    for endpoint in ("search", "context"):
        got = _stats(timed[endpoint]) if timed else (None, None)
        floor = _stats(bare) if bare else (None, None)
        rows += [
            Row(f"{at} {endpoint} median", got[0], "ms", baseline, floor[0], MISSING),
            Row(f"{at} {endpoint} p99", got[1], "ms", baseline, floor[1], MISSING),
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
