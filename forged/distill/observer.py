"""The `distill` observer loop: takes batches from its feed, has them distilled (forged.distill),
and commits each outcome with the watermark."""

from __future__ import annotations

import structlog
import trio

from forged.config import DistillConfig
from forged.distill.batches import BatchDistiller
from forged.hub import Batcher, Feed, Progress
from forged.models import DISTILL_OBSERVER

__all__ = ["DistillObserver"]

log = structlog.get_logger(__name__)


class DistillObserver:
    """The observer loop: takes batches from its feed, distils them, commits each with the
    watermark."""

    name = DISTILL_OBSERVER

    def __init__(self, work: BatchDistiller, batching: DistillConfig) -> None:
        self.work = work
        self.batching = batching

    async def run(self, interactions: Feed, progress: Progress) -> None:
        batcher = Batcher(
            interactions,
            max_items=self.batching.max_batch_interactions,
            max_weight=self.batching.max_batch_tokens,
            weight=lambda i: i.tokens,
            keep=interactions.wanted,
        )
        while True:
            batch = await batcher.next()
            if progress.stopping:
                await trio.sleep_forever()  # shutting down: leave it in the log for next time
            progress.start_batch(batch)
            outcome = await self.work.distill_batch(batch, progress)
            await progress.commit_batch(outcome)
            log.info(
                "batch_committed",
                observer=self.name,
                batch_id=outcome.runs[0].batch_id if outcome.runs else None,
                interactions=len(batch),
                watermark=outcome.watermark,
                dead_letters=len(outcome.dead_letters),
                llm_ms=sum(r.usage.ms for r in outcome.runs),
            )
            progress.set_state("idle")
