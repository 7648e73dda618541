"""Memory: the daemon's peak RSS, idle and with a large backlog on a stalled LLM."""

from __future__ import annotations

import sys

import trio

from bench.corpus import Turn
from bench.report import Row
from bench.runner import distill_status, fake_llm, running
from bench.sizes import Context
from bench.stores import backlog_store

# An idle interpreter that imported everything the daemon imports, reporting its own VmHWM.
IMPORTS_ONLY = (
    "import forged.daemon.runner, forged.cli.commands\n"
    "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))"
)
SETTLE_READS = 20  # status reads after the stall, so the feeders have filled their channels


async def baseline_rss_mib() -> float:
    done = await trio.run_process([sys.executable, "-c", IMPORTS_ONLY], capture_stdout=True)
    return int(done.stdout) / 1024


async def _peak(ctx: Context, name: str, store: str | None) -> tuple[float, int]:
    """Peak RSS (MiB) and backlog of a daemon whose LLM never answers."""
    sections = {"store": {"path": store}} if store else {}
    async with (
        fake_llm(default="hang") as llm,
        running(ctx.work / name, llm.base_url, **sections) as daemon,
    ):
        client = await daemon.client()
        if store:
            await llm.wait_for_calls(1)  # the first batch is in the model's hands, for ever
        for _ in range(SETTLE_READS):
            status = await distill_status(client)
        await client.aclose()
        return daemon.peak_rss_mib(), status["backlog"]


async def measure(ctx: Context, corpus: list[Turn]) -> list[Row]:
    size = ctx.size
    backlog = backlog_store(ctx, corpus)
    idle, _ = await _peak(ctx, "idle", None)
    stalled, waiting = await _peak(ctx, "stalled", backlog.path)
    if waiting != size.backlog:
        raise RuntimeError(f"memory: backlog {waiting}, expected {size.backlog}")
    floor = await baseline_rss_mib()
    baseline = "idle Python that imported the same modules"
    return [
        Row("memory: peak RSS, empty backlog", idle, "MiB", baseline, floor),
        Row(
            f"memory: peak RSS, {waiting:,} interactions waiting on a stalled LLM",
            stalled,
            "MiB",
            baseline,
            floor,
        ),
    ]
