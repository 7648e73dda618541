"""The `distill` observer: batches of interactions become summaries and typed facts."""

from __future__ import annotations

import random
import uuid
from itertools import groupby

import structlog
import trio

from forged.config import DistillConfig, DistillerConfig
from forged.errors import ContextOverflow, InvalidAnswer, LLMUnavailable
from forged.hub import Batcher, Progress
from forged.llm import Distiller
from forged.models import (
    BatchOutcome,
    DeadLetter,
    DistilledMemory,
    DistillRun,
    ScopeResult,
    StoredInteraction,
)
from forged.prompt import render_transcript

log = structlog.get_logger("forged.distill")


class _Collected:
    """What a batch has produced so far."""

    def __init__(self, batch_id: str) -> None:
        self.batch_id = batch_id
        self.results: list[ScopeResult] = []
        self.dead_letters: list[DeadLetter] = []
        self.runs: list[DistillRun] = []


class DistillObserver:
    """Distils each batch, scope by scope, and commits results with the watermark."""

    name = "distill"

    def __init__(
        self, distiller: Distiller, batching: DistillConfig, policy: DistillerConfig
    ) -> None:
        self.distiller = distiller
        self.batching = batching
        self.policy = policy

    async def start(
        self, interactions: trio.MemoryReceiveChannel[StoredInteraction], progress: Progress
    ) -> None:
        batcher = Batcher(
            interactions,
            max_items=self.batching.max_batch_interactions,
            max_weight=self.batching.max_batch_tokens,
            weight=lambda i: i.tokens,
        )
        while True:
            batch = await batcher.next()
            if progress.stopping:
                await trio.sleep_forever()  # shutting down: leave it in the log for next time
            progress.set_state("distilling")
            outcome = await self.distill_batch(batch, progress)
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

    async def distill_batch(
        self, batch: list[StoredInteraction], progress: Progress, *, watermark: bool = True
    ) -> BatchOutcome:
        """Distil a batch scope by scope; the outcome carries everything to commit."""
        collected = _Collected(uuid.uuid4().hex[:16])
        for scope, items in groupby(sorted(batch, key=lambda i: i.scope), key=lambda i: i.scope):
            await self._distill_group(scope, list(items), collected, progress)
        return BatchOutcome(
            results=collected.results,
            dead_letters=collected.dead_letters,
            runs=collected.runs,
            watermark=batch[-1].seq if watermark else None,
        )

    async def _distill_group(
        self, scope: str, items: list[StoredInteraction], out: _Collected, progress: Progress
    ) -> None:
        """Distil one scope's interactions; split in halves what the model cannot handle."""
        try:
            memory = await self._call(items, progress)
        except (ContextOverflow, InvalidAnswer) as exc:
            if len(items) > 1:
                log.warning(
                    "batch_split",
                    observer=self.name,
                    scope=scope,
                    interactions=len(items),
                    reason=str(exc),
                )
                half = len(items) // 2
                await self._distill_group(scope, items[:half], out, progress)
                await self._distill_group(scope, items[half:], out, progress)
                return
            self._dead_letter(items[0], exc, out)
            return
        sessions = {i.session for i in items}
        out.results.append(
            ScopeResult(
                batch_id=out.batch_id,
                scope=scope,
                session=sessions.pop() if len(sessions) == 1 else None,
                summary=memory.summary,
                facts=memory.facts,
                first_seq=items[0].seq,
                last_seq=items[-1].seq,
            )
        )
        out.runs.append(self._run(out.batch_id, scope, items, memory, "committed"))

    def _dead_letter(self, item: StoredInteraction, exc: Exception, out: _Collected) -> None:
        reason = f"{type(exc).__name__}: {exc}"
        raw = getattr(exc, "raw", None)
        log.error("dead_letter", observer=self.name, seq=item.seq, reason=reason)
        out.dead_letters.append(DeadLetter(seq=item.seq, reason=reason, raw=raw))
        empty = DistilledMemory(summary="", facts=[])
        out.runs.append(self._run(out.batch_id, item.scope, [item], empty, "dead_letter", reason))

    def _run(
        self,
        batch_id: str,
        scope: str,
        items: list[StoredInteraction],
        memory: DistilledMemory,
        outcome: str,
        error: str | None = None,
    ) -> DistillRun:
        return DistillRun(
            batch_id=batch_id,
            model=self.distiller.model,
            scope=scope,
            interactions=len(items),
            first_seq=items[0].seq,
            last_seq=items[-1].seq,
            usage=memory.usage,
            outcome=outcome,
            error=error,
        )

    async def _call(self, items: list[StoredInteraction], progress: Progress) -> DistilledMemory:
        """Call the distiller: transient errors retry forever, bad answers `max_attempts` times."""
        transcript = render_transcript(items)
        delay = self.policy.backoff_initial
        attempts = 0
        while True:
            try:
                memory = await self.distiller.distill(transcript)
            except LLMUnavailable as exc:
                progress.set_state("waiting_for_llm", error=str(exc))
                pause = delay * random.uniform(0.5, 1.0)
                log.warning("llm_unavailable", observer=self.name, error=str(exc), retry_in=pause)
                await trio.sleep(pause)
                delay = min(delay * 2, self.policy.backoff_max)
                progress.set_state("distilling")
                continue
            except InvalidAnswer as exc:
                attempts += 1
                progress.status.last_error = str(exc)
                log.warning(
                    "llm_invalid_answer", observer=self.name, error=str(exc), attempt=attempts
                )
                if attempts >= self.policy.max_attempts:
                    raise
                continue
            return memory
