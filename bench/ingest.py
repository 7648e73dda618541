"""Ingest: durable interactions per second through the socket, against bare SQLite."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

from bench.corpus import Turn, interactions, log_row, ndjson
from bench.report import AT_LEAST_BARE, Goal, Row
from bench.runner import Client, running
from bench.sizes import Context
from forged.store.sqlite_schema import migrate
from forged.timestamps import now

CLIENTS = 16  # concurrent clients in the concurrent scenario
HALF_OF_BARE = Goal(0.5, at_least=True)  # one bulk request against a bare bulk insert
# With the turn index kept against it off: the keeper follows the log on its own, so ingest
# keeps its pace but for the CPU the keeper takes (a tenth at most).
UNCHANGED = Goal(0.9, at_least=True)
NO_LLM = "http://127.0.0.1:9/v1"  # distillation is off: ingest is measured alone
_INSERT = """INSERT INTO interactions
    (client_id, scope, session, timestamp, received_at, tokens, messages, metadata)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)"""


def _bare(path: str, rows: list[tuple[Any, ...]], per_transaction: int) -> float:
    """Rows per second into a fresh file with forged's schema and pragmas, no daemon in between."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    migrate(conn)
    started = time.perf_counter()
    for i in range(0, len(rows), per_transaction):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(_INSERT, rows[i : i + per_transaction])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return len(rows) / elapsed


async def _one_each(socket: str, bodies: list[bytes], clients: int) -> None:
    async def client(share: list[bytes]) -> None:
        c = await Client.connect(socket)
        for body in share:
            await c.push(body)
        await c.aclose()

    async with trio.open_nursery() as nursery:
        for k in range(clients):
            nursery.start_soon(client, bodies[k::clients])


async def _bulk(socket: str, bodies: list[bytes]) -> None:
    c = await Client.connect(socket)
    for body in bodies:
        await c.push(body, "application/x-ndjson")
    await c.aclose()


async def _forged(
    ctx: Context, name: str, send: Callable[[str], Awaitable[None]], n: int, index: bool = True
) -> float:
    """Interactions per second through a fresh daemon's socket; accepted means committed. Its
    turn index is kept meanwhile, unless `index` is false."""
    sections = {"distill": {"enabled": False}, "index": {"enabled": index}}
    async with running(ctx.work / name, NO_LLM, **sections) as daemon:
        started = time.perf_counter()
        await send(daemon.socket)
        elapsed = time.perf_counter() - started
        client = await daemon.client()
        status = await client.get("/v1/status")
        await client.aclose()
    if status["log"]["count"] != n:
        raise RuntimeError(f"ingest {name}: {status['log']['count']} stored, {n} pushed")
    return n / elapsed


async def measure(ctx: Context, corpus: list[Turn]) -> list[Row]:
    n, bulk = ctx.size.ingest, ctx.size.ingest_bulk
    items = interactions(corpus, n, "ingest")
    one = [msgspec.json.encode(i) for i in items]
    chunks = [ndjson(items[i : i + bulk]) for i in range(0, n, bulk)]
    received = now()
    rows = [log_row(i, received) for i in items]
    bare = {
        k: await trio.to_thread.run_sync(_bare, str(ctx.work / f"bare-{k}.db"), rows, k)
        for k in (1, bulk, n)
    }
    serial = await _forged(ctx, "one", lambda s: _one_each(s, one, 1), n)
    parallel = await _forged(ctx, "many", lambda s: _one_each(s, one, CLIENTS), n)
    chunked = await _forged(ctx, "bulk", lambda s: _bulk(s, chunks), n)
    whole = await _forged(ctx, "whole", lambda s: _bulk(s, [ndjson(items)]), n)
    unindexed = {
        "many": await _forged(ctx, "many-off", lambda s: _one_each(s, one, CLIENTS), n, False),
        "bulk": await _forged(ctx, "bulk-off", lambda s: _bulk(s, chunks), n, False),
    }
    per_request = "bare SQLite, 1 transaction per interaction"
    off = "the same with the turn index off"
    return [
        Row(f"ingest: {n:,} pushed one per request, 1 client", serial, "/s", per_request, bare[1]),
        Row(
            f"ingest: {n:,} pushed one per request, {CLIENTS} clients",
            parallel,
            "/s",
            per_request,
            bare[1],
            goal=AT_LEAST_BARE,  # group commit: one fsync for the requests that arrive together
        ),
        Row(
            f"ingest: {n:,} as NDJSON, {bulk:,} per request",
            chunked,
            "/s",
            f"bare SQLite, 1 transaction per {bulk:,}",
            bare[bulk],
        ),
        Row(
            f"ingest: {n:,} in one NDJSON request",
            whole,
            "/s",
            f"bare SQLite, 1 transaction of {n:,}",
            bare[n],
            goal=HALF_OF_BARE,
        ),
        Row(
            f"ingest: {n:,} pushed one per request, {CLIENTS} clients, turn index kept",
            parallel,
            "/s",
            off,
            unindexed["many"],
            goal=UNCHANGED,
        ),
        Row(
            f"ingest: {n:,} as NDJSON, {bulk:,} per request, turn index kept",
            chunked,
            "/s",
            off,
            unindexed["bulk"],
            goal=UNCHANGED,
        ),
    ]
