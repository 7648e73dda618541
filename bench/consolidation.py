"""Consolidation: one scope of many facts, consolidated now; the LLM calls that takes are bounded."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Any

import msgspec

from bench.report import Row
from bench.runner import fake_llm, running
from bench.sizes import Context
from bench.stores import _fact_rows, _finish, _fresh, _load
from forged.config import ConsolidateConfig

SCOPE = "user:0"
PER_CALL = ConsolidateConfig().facts_per_call  # the default chunk size
ONE_PER_FACT = "one call per fact (ADD/UPDATE/DELETE each)"
_INSERT = (
    "INSERT INTO facts (kind, text, norm, scope, session, batch_id, first_seq, last_seq,"
    " first_at, last_at, created_at, last_seen_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _build(path: Any, n: int) -> None:
    """`n` facts, all in one scope."""
    conn = _fresh(path)
    rows = ((*row[:3], SCOPE, *row[4:]) for row in _fact_rows(n, datetime.now(UTC)))
    _load(conn, _INSERT, rows)
    _finish(conn)


async def measure(ctx: Context) -> list[Row]:
    n = ctx.size.consolidate_facts
    directory = ctx.work / "consolidate"
    directory.mkdir(parents=True, exist_ok=True)
    _build(directory / "forged.db", n)
    settings = {
        "enabled": True,
        "min_new_facts": 10 * n,
        "max_wait": 1e9,
        "check_interval": 1e9,
        "max_calls_per_hour": 10 * n,
    }
    async with (
        fake_llm(ctx.size.llm_latency) as llm,
        running(directory, llm.base_url, consolidate=settings) as daemon,
    ):
        client = await daemon.client()
        started = time.perf_counter()
        status, body = await client.request("POST", f"/v1/consolidate?scope={SCOPE}")
        elapsed = time.perf_counter() - started
        await client.aclose()
    if status != 200:
        raise RuntimeError(f"consolidate: {status} {body[:200]!r}")
    (run,) = msgspec.json.decode(body)["runs"]
    calls = run["usage"]["calls"]
    if run["facts"] != n or calls > math.ceil(n / 2):
        raise RuntimeError(f"consolidate: {run['facts']} facts in {calls} calls")
    seconds = f"{elapsed:.1f} s at {ctx.size.llm_latency * 1000:.0f} ms per call"
    measure = f"consolidate: LLM calls for a scope of {n:,} facts ({PER_CALL} per call, {seconds})"
    return [Row(measure, calls, "", ONE_PER_FACT, n)]
