"""The daemon's metrics for Prometheus: what happened (counters and histograms, updated as it
happens) and what is (gauges, read from a snapshot taken at each scrape).

Every daemon has a registry of its own, never prometheus_client's global one: two daemons in
one process (the tests) count apart, and nothing a library registers leaks in. Labels are
route templates, observer names and fixed words, never a scope: scopes are the users' data,
unbounded in number, and a metrics scraper is not allowed to read them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "Metrics", "ObserverGauges", "Snapshot"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus text format 0.0.4
# Seconds: a request or a recall answers in milliseconds; a model call takes seconds to minutes.
FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MODEL_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
STATES = ("idle", "distilling", "waiting_for_llm")  # an observer's state, one gauge each


@dataclass
class ObserverGauges:
    """One observer as a scrape finds it."""

    name: str
    state: str
    watermark: int
    backlog: int
    lag_s: float  # age of the oldest interaction it has not committed; 0 when caught up
    dead_letters: int


@dataclass
class Snapshot:
    """What is, at the scrape: the log, the store and each observer."""

    log_count: int = 0
    last_seq: int = 0
    store_bytes: int = 0
    reads: int = 0  # reads that took a reader connection
    reads_waited: int = 0  # of them, those that found none free for their scope or client
    read_wait_s: float = 0.0  # the time they waited, in all
    uptime_s: float = 0.0
    observers: list[ObserverGauges] = field(default_factory=list)


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)


class _SnapshotCollector(Collector):
    """Yields the snapshot the last scrape took, as gauges (and the readers' counters)."""

    def __init__(self) -> None:
        self.snapshot = Snapshot()

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot
        yield _gauge("forged_uptime_seconds", "Seconds since the daemon started.", s.uptime_s)
        yield _gauge("forged_log_interactions", "Interactions the log holds.", s.log_count)
        yield _gauge("forged_log_last_seq", "Seq of the newest stored interaction.", s.last_seq)
        yield _gauge(
            "forged_store_size_bytes",
            "Bytes the database takes (files, or PostgreSQL's).",
            s.store_bytes,
        )
        yield CounterMetricFamily("forged_reads", "Reads that took a reader connection.", s.reads)
        yield CounterMetricFamily(
            "forged_reader_waits",
            "Reads that waited for a free reader connection.",
            s.reads_waited,
        )
        yield CounterMetricFamily(
            "forged_reader_wait_seconds",
            "Seconds reads waited for a reader connection.",
            s.read_wait_s,
        )
        yield from self._observers(s.observers)

    @staticmethod
    def _observers(observers: list[ObserverGauges]) -> Iterator[Metric]:
        families = {
            "watermark": ("forged_observer_watermark", "Seq up to which the observer is done."),
            "backlog": ("forged_observer_backlog", "Interactions stored but not yet observed."),
            "lag_s": (
                "forged_observer_lag_seconds",
                "Age of the oldest interaction the observer has not committed (0: caught up).",
            ),
            "dead_letters": ("forged_observer_dead_letters", "Open dead letters."),
        }
        for attribute, (name, text) in families.items():
            family = GaugeMetricFamily(name, text, labels=["observer"])
            for o in observers:
                family.add_metric([o.name], getattr(o, attribute))
            yield family
        state = GaugeMetricFamily(
            "forged_observer_state",
            "1 for the state the observer is in.",
            labels=["observer", "state"],
        )
        for o in observers:
            for name in STATES:
                state.add_metric([o.name, name], float(o.state == name))
        yield state


class Metrics:
    """The registry of one daemon, and the instruments its parts update."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.accepted = Counter(
            "forged_interactions_accepted", "Interactions stored (202).", registry=r
        )
        self.duplicates = Counter(
            "forged_interactions_duplicate", "Pushed interactions already stored.", registry=r
        )
        self.accepted_bytes = Counter(
            "forged_ingest_bytes",
            "Bytes of request bodies whose interactions were stored.",
            registry=r,
        )
        self.requests = Histogram(
            "forged_request_duration_seconds",
            "Time to answer a request, by route.",
            ["route", "method", "code"],
            buckets=FAST_BUCKETS,
            registry=r,
        )
        self.recall = Histogram(
            "forged_recall_duration_seconds",
            "Time recall took to answer, by kind.",
            ["kind"],
            buckets=FAST_BUCKETS,
            registry=r,
        )
        self.batches = Counter(
            "forged_observer_batches", "Batches an observer committed.", ["observer"], registry=r
        )
        self.model_calls = Counter(
            "forged_model_calls",
            "Calls to the model, by outcome (ok, or the error).",
            ["observer", "outcome"],
            registry=r,
        )
        self.model_seconds = Histogram(
            "forged_model_call_duration_seconds",
            "Time a call to the model took.",
            ["observer"],
            buckets=MODEL_BUCKETS,
            registry=r,
        )
        self.model_tokens = Counter(
            "forged_model_tokens",
            "Tokens the model reported, prompt or completion.",
            ["observer", "type"],
            registry=r,
        )
        self._state = _SnapshotCollector()
        r.register(self._state)

    def render(self, snapshot: Snapshot) -> bytes:
        """The registry in the Prometheus text format, with `snapshot`'s gauges."""
        self._state.snapshot = snapshot
        return generate_latest(self.registry)
