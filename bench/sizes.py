"""Benchmark sizes: how much work each measurement does, from a CI smoke run to a manual soak."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Size:
    """How much each measurement does; `default` must finish in 15 minutes on two cores."""

    name: str
    ingest: int  # interactions pushed per ingest scenario
    ingest_bulk: int  # interactions per NDJSON request in the bulk scenario
    burst: int  # conversation turns in the batching burst
    llm_latency: float  # seconds the fake LLM takes per call in the batching burst
    recall_facts: tuple[int, ...]  # store sizes, in facts, for the recall latencies
    recall_queries: int  # queries per endpoint and store size
    backlog: int  # interactions waiting on the stalled LLM, also the large store for start
    backlog_bytes: int  # approximate size of that store on disk
    starts: int  # daemon starts per store; the median is reported


SIZES = {
    "quick": Size("quick", 300, 100, 40, 0.02, (300, 1_000), 20, 2_000, 2 << 20, 1),
    "default": Size(
        "default",
        10_000,
        1_000,
        1_000,
        0.2,
        (10_000, 100_000, 1_000_000),
        200,
        1_000_000,
        1 << 30,
        3,
    ),
    "large": Size(
        "large",
        50_000,
        1_000,
        3_000,
        0.2,
        (10_000, 100_000, 1_000_000, 5_000_000),
        500,
        5_000_000,
        5 << 30,
        5,
    ),
}


@dataclass(frozen=True)
class Context:
    """What every measurement gets: the size, a scratch directory, and the store cache."""

    size: Size
    work: Path  # scratch space, removed after the run; short, so socket paths fit
    cache: Path  # large stores built once and kept between runs
