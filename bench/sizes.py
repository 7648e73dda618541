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
    recall_facts: tuple[int, ...]  # store sizes, in facts (and as many turns), for recall
    recall_queries: int  # queries per endpoint and store size
    backlog: int  # interactions waiting on the stalled LLM, also the large store for start
    backlog_bytes: int  # approximate size of that store on disk
    starts: int  # daemon starts per store; the median is reported
    scrub: int  # interactions scrubbed per pass in the scrub measurement
    quality_conversations: int  # LoCoMo conversations the quality step distils and questions
    consolidate_facts: int = 1_000  # facts in the scope the consolidation step consolidates
    import_bytes: int = 500_000_000  # size of the ChatGPT export the import step generates
    onescope_turns: int = 300_000  # interactions in the one-scope recall step: a year of chat
    embedded_turns: int = 256  # turns the model embeds per throughput figure (meaning step)
    index_vectors: int = 1_000_000  # vectors whose index's memory the meaning step measures


RECALL_MILLION = 1_000_000  # the store `--recall-million` adds: minutes to build the first time
SIZES = {
    "quick": Size(
        "quick",
        ingest=100,
        ingest_bulk=50,
        burst=20,
        llm_latency=0.02,
        recall_facts=(100, 300),
        recall_queries=10,
        backlog=500,
        backlog_bytes=1 << 20,
        starts=1,
        scrub=100,
        quality_conversations=1,
        import_bytes=5_000_000,
        onescope_turns=3_000,
        embedded_turns=32,
        index_vectors=10_000,
    ),
    "default": Size(
        "default",
        ingest=10_000,
        ingest_bulk=1_000,
        burst=1_000,
        llm_latency=0.2,
        recall_facts=(10_000, 100_000),
        recall_queries=100,
        backlog=1_000_000,
        backlog_bytes=1 << 30,
        starts=3,
        scrub=5_000,
        quality_conversations=2,
    ),
    "large": Size(
        "large",
        ingest=50_000,
        ingest_bulk=1_000,
        burst=3_000,
        llm_latency=0.2,
        recall_facts=(10_000, 100_000, 1_000_000, 5_000_000),
        recall_queries=300,
        backlog=5_000_000,
        backlog_bytes=5 << 30,
        starts=5,
        scrub=20_000,
        quality_conversations=10,
    ),
}


@dataclass(frozen=True)
class Context:
    """What every measurement gets: the size, a scratch directory, and the store cache."""

    size: Size
    work: Path  # scratch space, removed after the run; short, so socket paths fit
    cache: Path  # large stores built once and kept between runs
