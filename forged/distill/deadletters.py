"""Dead letters: the interactions the distiller gave up on, distilled again on request."""

from __future__ import annotations

import structlog
import trio

from forged.distill.batches import RERUN, BatchDistiller, Distilled, new_batch_id
from forged.hub import Progress
from forged.llm.retry import UNWATCHED
from forged.models import DISTILL_OBSERVER, RedistillReport, RedistillResult
from forged.store.backend import Backend
from forged.store.records import BatchOutcome

__all__ = ["Redistiller"]

log = structlog.get_logger(__name__)


class Redistiller:
    """Distils open dead letters again, each alone, and commits what works.

    It gets the store to read the letters, the work (which raises at once when the LLM is
    unreachable) and the distill observer's progress to commit through.
    """

    def __init__(self, store: Backend, work: BatchDistiller, progress: Progress) -> None:
        self._store = store
        self._work = work
        self._progress = progress
        self._running = trio.Lock()  # one re-run at a time: never two results for a seq

    async def redistill(self, first_seq: int, last_seq: int) -> RedistillReport:
        """Re-run the open dead letters in the seq range; results and resolved letters commit
        in one transaction, the watermark stays. Raises `LLMUnavailable`, committing nothing."""
        async with self._running:
            letters = await self._store.open_dead_letters(DISTILL_OBSERVER, first_seq, last_seq)
            out, batch_id = Distilled(), new_batch_id()
            results: list[RedistillResult] = []
            resolved: list[int] = []
            for letter in letters:
                item, done = letter.interaction, Distilled()
                await self._work.distill_group(batch_id, item.scope, [item], done, UNWATCHED, RERUN)
                out.runs += done.runs
                if done.failed:  # it stays open as it was; no second letter
                    reason = done.failed[0].reason
                    results.append(RedistillResult(item.seq, letter.id, "still_failing", 0, reason))
                    continue
                out.results += done.results
                resolved.append(letter.id)
                facts = len(done.results[0].facts)
                results.append(RedistillResult(item.seq, letter.id, "redistilled", facts))
            if letters:
                await self._progress.commit_batch(
                    BatchOutcome(out.results, [], out.runs, None, resolved)
                )
        report = RedistillReport(len(resolved), len(results) - len(resolved), results)
        log.info(
            "redistilled",
            observer=DISTILL_OBSERVER,
            redistilled=report.redistilled,
            still_failing=report.still_failing,
        )
        return report
