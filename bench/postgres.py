"""PostgreSQL: ingest with one and two daemons on one database, recall latency, and their floors."""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any

import msgspec
import psycopg
import trio

from bench.corpus import Turn, interactions, log_row
from bench.ingest import CLIENTS, NO_LLM, _one_each
from bench.recall import _queries, _stats, _through_socket
from bench.report import Row
from bench.runner import running
from bench.sizes import Context
from bench.stores import _fact_rows, _summary_rows
from forged.config import StoreConfig
from forged.store.postgres import PostgresStore
from forged.timestamps import now
from tests.support import daemons
from tests.support.postgres import Server, binaries, postgres_server

RECALL_FACTS = 100_000  # the store size recall is measured at (or the run's largest, if smaller)
_INSERT = """INSERT INTO interactions
    (client_id, scope, session, timestamp, received_at, tokens, messages, metadata)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"""
_FACT_COLUMNS = (
    "kind, text, norm, scope, session, batch_id, first_seq, last_seq, first_at,"
    " last_at, created_at, last_seen_at"
)
_SUMMARY_COLUMNS = (
    "observer, batch_id, scope, session, text, first_seq, last_seq, first_at, last_at, created_at"
)


def _migrated(server: Server) -> str:
    """A new database with forged's PostgreSQL schema."""
    url = server.new_database()
    PostgresStore(StoreConfig(url=url)).close()
    return url


def _bare(url: str, rows: list[tuple[Any, ...]]) -> float:
    """Rows per second, one transaction each, from one psycopg connection: no daemon between."""
    with psycopg.connect(url, autocommit=True, options="-c synchronous_commit=on") as conn:
        started = time.perf_counter()
        for row in rows:
            with conn.transaction():
                conn.execute(_INSERT, row)
        return len(rows) / (time.perf_counter() - started)


async def _daemons(ctx: Context, url: str, bodies: list[bytes], count: int) -> float:
    """Interactions per second pushed to `count` daemons sharing the database at `url`."""
    daemons.STORE_URL = url
    try:
        async with AsyncExitStack() as stack:
            started_daemons = [
                await stack.enter_async_context(
                    running(ctx.work / f"pg-{count}-{k}", NO_LLM, distill={"enabled": False})
                )
                for k in range(count)
            ]
            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for k, daemon in enumerate(started_daemons):
                    nursery.start_soon(_one_each, daemon.socket, bodies[k::count], CLIENTS // count)
            elapsed = time.perf_counter() - started
    finally:
        daemons.STORE_URL = None
    with psycopg.connect(url) as conn:
        (stored,) = conn.execute("SELECT count(*) FROM interactions").fetchone() or (0,)
    if stored != len(bodies):
        raise RuntimeError(f"postgres ingest: {stored} stored, {len(bodies)} pushed")
    return len(bodies) / elapsed


def _load_facts(url: str, n: int) -> None:
    """`n` facts and their summaries, written with COPY; the GIN indexes follow."""
    stamp = datetime.now(UTC)
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        for table, columns, rows in (
            ("facts", _FACT_COLUMNS, _fact_rows(n, stamp)),
            ("summaries", _SUMMARY_COLUMNS, _summary_rows(n, stamp)),
        ):
            with cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        cur.execute("ANALYZE")


def _in_process(url: str, queries: list[tuple[str, str]]) -> list[float]:
    """The same searches by forged's PostgreSQL recall on a bare connection: the SQL's cost."""
    from forged.recall.postgres import search
    from forged.recall.query import SearchQuery

    samples = []
    with psycopg.connect(url, autocommit=True) as conn:
        for q, scope in queries:
            started = time.perf_counter()
            search(conn, SearchQuery(q=q, scope=scope, limit=10), 30.0)
            samples.append(time.perf_counter() - started)
    return samples


async def _recall(ctx: Context, server: Server) -> list[Row]:
    n = min(RECALL_FACTS, max(ctx.size.recall_facts))
    url = await trio.to_thread.run_sync(_migrated, server)
    await trio.to_thread.run_sync(_load_facts, url, n)
    queries = _queries(ctx.size.recall_queries)
    daemons.STORE_URL = url
    try:
        async with running(ctx.work / "pg-recall", NO_LLM, distill={"enabled": False}) as daemon:
            client = await daemon.client()
            timed = await _through_socket(client, queries)
            await client.aclose()
    finally:
        daemons.STORE_URL = None
    bare = _stats(await trio.to_thread.run_sync(_in_process, url, queries))
    at, baseline = f"postgres recall: {n:,} facts,", "same query in-process, no daemon"
    rows = []
    for endpoint in ("search", "context"):
        median, p99 = _stats(timed[endpoint])
        rows += [
            Row(f"{at} {endpoint} median", median, "ms", baseline, bare[0]),
            Row(f"{at} {endpoint} p99", p99, "ms", baseline, bare[1]),
        ]
    return rows


async def measure(ctx: Context, corpus: list[Turn]) -> list[Row]:
    if binaries() is None:
        note = "no PostgreSQL binaries on this machine"
        return [Row("postgres: ingest and recall", None, "/s", "", None, note)]
    n = ctx.size.ingest
    items = interactions(corpus, n, "pg")
    bodies = [msgspec.json.encode(i) for i in items]
    rows = [log_row(i, now()) for i in items]
    with postgres_server() as server:
        bare = await trio.to_thread.run_sync(_bare, _migrated(server), rows)
        one = await _daemons(ctx, _migrated(server), bodies, 1)
        two = await _daemons(ctx, _migrated(server), bodies, 2)
        recall = await _recall(ctx, server)
    baseline = "bare psycopg, 1 transaction per interaction"
    return [
        Row(
            f"postgres ingest: {n:,} one per request, {CLIENTS} clients, 1 daemon",
            one,
            "/s",
            baseline,
            bare,
        ),
        Row(
            f"postgres ingest: {n:,} one per request, {CLIENTS} clients, 2 daemons",
            two,
            "/s",
            baseline,
            bare,
        ),
        *recall,
    ]
