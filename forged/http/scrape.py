"""`GET /v1/metrics`: the daemon's state read at the scrape, with its counters, in Prometheus's
text format (forged.metrics)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
import trio

from forged.hub import Hub
from forged.lifecycle import Lifecycle
from forged.metrics import ObserverGauges, Snapshot
from forged.models import ObserverStatus
from forged.store.backend import Backend
from forged.store.portable import portable

__all__ = ["method_label", "snapshot", "write_textfile"]

log = structlog.get_logger(__name__)

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE"})  # any other is counted as "other"


def method_label(method: str) -> str:
    return method if method in METHODS else "other"


def _received_after(conn: Any, seq: int) -> str | None:
    """When the first interaction after `seq` arrived (None: there is none)."""
    row = (
        portable(conn)
        .execute("SELECT received_at FROM interactions WHERE seq > ? ORDER BY seq LIMIT 1", (seq,))
        .fetchone()
    )
    return str(row[0]) if row else None


async def _lag_s(store: Backend, status: ObserverStatus) -> float:
    """Seconds since the oldest interaction `status`'s observer has not committed arrived."""
    if status.backlog <= 0:
        return 0.0
    received = await store.read(_received_after, status.watermark)
    if received is None:
        return 0.0
    since = datetime.fromisoformat(received.replace("Z", "+00:00"))
    return max(0.0, (datetime.now(UTC) - since).total_seconds())


async def snapshot(store: Backend, hub: Hub, lifecycle: Lifecycle) -> Snapshot:
    """The log, the store and every observer as they are now."""
    await hub.refresh()  # totals and backlogs as the store has them
    observers = [
        ObserverGauges(
            name=s.name,
            state=s.state,
            watermark=s.watermark,
            backlog=s.backlog,
            lag_s=await _lag_s(store, s),
            dead_letters=s.dead_letters,
        )
        for s in hub.statuses()
    ]
    reads, waited, wait_s = store.read_waits()
    return Snapshot(
        log_count=store.count,
        last_seq=store.last_seq,
        store_bytes=await store.size_bytes(),
        reads=reads,
        reads_waited=waited,
        read_wait_s=wait_s,
        uptime_s=lifecycle.uptime(),
        observers=observers,
    )


def _replace(path: Path, text: bytes) -> None:
    """Write `text` to `path` whole: a scraper never reads half a file."""
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_bytes(text)
    partial.replace(path)


async def write_textfile(
    path: Path, store: Backend, hub: Hub, lifecycle: Lifecycle, interval: float
) -> None:
    """Write the metrics to `path` every `interval` seconds, for node_exporter's textfile
    collector (a scraper that cannot reach the socket); a failed write is logged and retried."""
    while True:
        text = hub.metrics.render(await snapshot(store, hub, lifecycle))
        try:
            await trio.to_thread.run_sync(_replace, path, text)
        except OSError as exc:
            log.warning("metrics_textfile_failed", path=str(path), error=str(exc))
        await trio.sleep(interval)
