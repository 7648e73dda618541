"""Start: from process start to READY=1, with an empty and with a large store."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import trio

from bench.corpus import Turn
from bench.report import Row
from bench.runner import fake_llm, running
from bench.sizes import Context
from bench.stores import backlog_store, size_mb
from forged.store.sqlite import Store

# Import the daemon and open the store with bare sqlite3: the schema check, nothing else.
BARE_OPEN = (
    "import sqlite3, sys, forged.daemon.runner\n"
    "c = sqlite3.connect(sys.argv[1])\n"
    "c.execute('PRAGMA journal_mode = WAL')\n"
    "c.execute('SELECT max(version) FROM schema_migrations').fetchone()\n"
)


async def _bare(store: str) -> float:
    started = time.perf_counter()
    await trio.run_process([sys.executable, "-c", BARE_OPEN, store])
    return time.perf_counter() - started


async def _ready(ctx: Context, name: str, store: str) -> float:
    """Seconds from spawning `forged serve` to its READY=1 (the LLM never answers: no writes)."""
    async with (
        fake_llm(default="hang") as llm,
        running(ctx.work / name, llm.base_url, store={"path": store}) as daemon,
    ):
        return daemon.ready_after


async def _median(ctx: Context, name: str, store: str) -> tuple[float, float]:
    runs = range(ctx.size.starts)
    ready = [await _ready(ctx, f"{name}-{i}", store) for i in runs]
    bare = [await _bare(store) for _ in runs]
    return statistics.median(ready), statistics.median(bare)


async def measure(ctx: Context, corpus: list[Turn]) -> list[Row]:
    empty = ctx.work / "empty.db"
    Store(str(empty)).close()
    large = backlog_store(ctx, corpus)
    baseline = "python: import forged.daemon.runner, sqlite3 open + schema check"
    rows = []
    for label, path in (
        ("empty store", str(empty)),
        (f"{size_mb(Path(large.path)):,.0f} MB store", large.path),
    ):
        ready, bare = await _median(ctx, label.split()[0], path)
        rows.append(Row(f"start: to READY=1, {label}", ready, "s", baseline, bare))
    return rows
