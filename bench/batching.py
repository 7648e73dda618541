"""Batching: a burst of conversation turns against a 200 ms LLM, batched and one call each."""

from __future__ import annotations

import time
from typing import Any

from bench.corpus import Turn, interactions, ndjson
from bench.report import Row
from bench.runner import fake_llm, running, wait_drained
from bench.sizes import Context

ONE_EACH = "max_batch_interactions = 1"


async def _burst(
    ctx: Context, name: str, body: bytes, n: int, **distill: Any
) -> tuple[dict[str, Any], float]:
    """Push the burst in one request; the distill status and the seconds until all is distilled."""
    async with (
        fake_llm(ctx.size.llm_latency) as llm,
        running(ctx.work / name, llm.base_url, distill=distill) as daemon,
    ):
        client = await daemon.client()
        started = time.perf_counter()
        accepted = await client.push(body, "application/x-ndjson")
        status = await wait_drained(client, accepted["last_seq"])
        elapsed = time.perf_counter() - started
        await client.aclose()
    if status["batches"] == 0 or accepted["accepted"] != n or status["dead_letters"]:
        raise RuntimeError(f"batching {name}: {accepted} pushed, status {status}")
    return status, elapsed


async def measure(ctx: Context, corpus: list[Turn]) -> list[Row]:
    n = ctx.size.burst
    body = ndjson(interactions(corpus, n, "burst"))
    batched, batched_s = await _burst(ctx, "batched", body, n)
    single, single_s = await _burst(ctx, "single", body, n, max_batch_interactions=1)
    ms = f"{ctx.size.llm_latency * 1000:.0f} ms"
    return [
        Row(
            f"batching: LLM calls for a burst of {n:,} turns",
            batched["llm_calls"],
            "",
            ONE_EACH,
            single["llm_calls"],
        ),
        Row(
            "batching: prompt tokens for the burst",
            batched["prompt_tokens"],
            "",
            ONE_EACH,
            single["prompt_tokens"],
        ),
        Row(
            f"batching: time to distil the burst, {ms} per LLM call",
            batched_s,
            "s",
            ONE_EACH,
            single_s,
        ),
    ]
