"""The `distill` observer: batches of interactions become summaries and typed facts."""

from __future__ import annotations

import uuid
from itertools import groupby

import msgspec
import structlog
import trio

from forged.backoff import Backoff
from forged.config import DistillConfig, DistillerConfig
from forged.errors import ContextOverflow, DistillError, InvalidAnswer, LLMUnavailable
from forged.grounding import Sources, check
from forged.hub import Batcher, Feed, Progress
from forged.llm import Distiller
from forged.models import (
    BatchOutcome,
    DeadLetter,
    DistilledMemory,
    DistillRun,
    Fact,
    LinePick,
    RedistillReport,
    RedistillResult,
    ScopeResult,
    StoredInteraction,
    Usage,
    normalise,
)
from forged.prompt import message_lines, render_chunks, render_transcript

RAW_LIMIT = 16_384  # characters of a failed answer kept with its dead letter

log = structlog.get_logger("forged.distill")


def add_usage(a: Usage, b: Usage | None) -> Usage:
    """The cost of two sets of calls together."""
    if b is None:
        return a
    return Usage(
        a.prompt_tokens + b.prompt_tokens,
        a.completion_tokens + b.completion_tokens,
        a.ms + b.ms,
        a.calls + b.calls,
    )


def merge(memories: list[DistilledMemory], max_facts: int) -> DistilledMemory:
    """One memory from the chunks of one interaction: summaries joined, facts de-duplicated."""
    facts: dict[tuple[str, str], Fact] = {}
    for memory in memories:
        for fact in memory.facts:
            facts.setdefault((fact.kind, normalise(fact.text)), fact)
    usage = Usage()
    for memory in memories:
        usage = add_usage(usage, memory.usage)
    summary = "\n".join(m.summary.strip() for m in memories if m.summary.strip())
    picks = list(dict.fromkeys(p for m in memories for p in m.picks))
    return DistilledMemory(summary, list(facts.values())[:max_facts], usage, picks[:max_facts])


def _picked(picks: list[LinePick], items: list[StoredInteraction]) -> tuple[list[Fact], int]:
    """The picked lines as facts, verbatim with their speaker; and how many named no line."""
    lines = {(i.seq, n): line for i in items for n, line in enumerate(message_lines(i), start=1)}
    facts = [
        Fact(p.kind, f"{lines[p.seq, p.line][0]}: {lines[p.seq, p.line][1].strip()}", [p.seq])
        for p in picks
        if (p.seq, p.line) in lines
    ]
    return facts, len(picks) - len(facts)


def ground(memory: DistilledMemory, items: list[StoredInteraction]) -> tuple[str, list[Fact], int]:
    """The summary and facts the interactions support, each fact with its sources; and how many
    were dropped (see forged.grounding). Picked lines become facts here."""
    sources = Sources.of(
        (i.seq, i.timestamp, "\n".join(f"{who}: {text}" for who, text in message_lines(i)))
        for i in items
    )
    picked, dropped = _picked(memory.picks, items)
    facts = []
    for fact in [*memory.facts, *picked]:
        verdict = check(fact.text, sources)
        if verdict.grounded:
            facts.append(Fact(fact.kind, fact.text, fact.sources or verdict.sources))
        else:
            dropped += 1
            log.info("ungrounded", kind=fact.kind, text=fact.text[:200], reason=verdict.reason)
    summary = memory.summary.strip()
    if summary and not (verdict := check(summary, sources, summary=True)).grounded:
        dropped += 1
        log.info("ungrounded", kind="summary", text=summary[:200], reason=verdict.reason)
        summary = ""
    return summary, facts, dropped


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
        self._redistilling = trio.Lock()  # one re-run at a time: never two results for a seq

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
        self, batch: list[StoredInteraction], progress: Progress | None
    ) -> BatchOutcome:
        """Distil a batch scope by scope; the outcome carries everything to commit."""
        collected = _Collected(uuid.uuid4().hex[:16])
        for scope, items in groupby(sorted(batch, key=lambda i: i.scope), key=lambda i: i.scope):
            await self._distill_group(scope, list(items), collected, progress)
        return BatchOutcome(
            results=collected.results,
            dead_letters=collected.dead_letters,
            runs=collected.runs,
            watermark=batch[-1].seq,
        )

    async def _distill_group(
        self, scope: str, items: list[StoredInteraction], out: _Collected, progress: Progress | None
    ) -> None:
        """Distil one scope's interactions; split in halves what the model cannot handle."""
        try:
            memory = await self._distill_items(items, progress)
        except (ContextOverflow, InvalidAnswer) as exc:
            if len(items) > 1:
                log.warning(
                    "batch_split",
                    observer=self.name,
                    scope=scope,
                    interactions=len(items),
                    reason=str(exc),
                )
                if exc.usage is not None:  # the failed tries cost something: keep the account
                    out.runs.append(self._run(out.batch_id, scope, items, exc.usage, "split", exc))
                half = len(items) // 2
                await self._distill_group(scope, items[:half], out, progress)
                await self._distill_group(scope, items[half:], out, progress)
                return
            self._dead_letter(items[0], exc, out)
            return
        summary, facts, ungrounded = ground(memory, items)
        if ungrounded:
            log.warning("ungrounded_dropped", observer=self.name, scope=scope, dropped=ungrounded)
        sessions = {i.session for i in items}
        out.results.append(
            ScopeResult(
                batch_id=out.batch_id,
                scope=scope,
                session=sessions.pop() if len(sessions) == 1 else None,
                summary=summary,
                facts=facts,
                first_seq=items[0].seq,
                last_seq=items[-1].seq,
            )
        )
        run = self._run(out.batch_id, scope, items, memory.usage, "committed")
        out.runs.append(msgspec.structs.replace(run, ungrounded=ungrounded))

    async def _distill_items(
        self, items: list[StoredInteraction], progress: Progress | None
    ) -> DistilledMemory:
        """One call for the items, or one per chunk of a single interaction over the budget."""
        budget = self.batching.max_batch_tokens
        if len(items) > 1 or items[0].tokens <= budget:
            return await self._call(render_transcript(items), progress)
        chunks = render_chunks(items[0], budget)
        log.info("interaction_chunked", observer=self.name, seq=items[0].seq, chunks=len(chunks))
        memories: list[DistilledMemory] = []
        for chunk in chunks:
            try:
                memories.append(await self._call(chunk, progress))
            except DistillError as exc:  # the chunks done so far were paid for too
                spent = merge(memories, self.policy.max_facts).usage
                exc.usage = add_usage(spent, exc.usage)
                raise
        return merge(memories, self.policy.max_facts)

    def _dead_letter(self, item: StoredInteraction, exc: DistillError, out: _Collected) -> None:
        reason = f"{type(exc).__name__}: {exc}"
        raw = None if exc.raw is None else exc.raw[:RAW_LIMIT]
        log.error("dead_letter", observer=self.name, seq=item.seq, reason=reason)
        out.dead_letters.append(DeadLetter(seq=item.seq, reason=reason, raw=raw))
        usage = exc.usage or Usage()
        out.runs.append(self._run(out.batch_id, item.scope, [item], usage, "dead_letter", exc))

    def _run(
        self,
        batch_id: str,
        scope: str,
        items: list[StoredInteraction],
        usage: Usage,
        outcome: str,
        error: Exception | None = None,
    ) -> DistillRun:
        return DistillRun(
            batch_id=batch_id,
            model=self.distiller.model,
            scope=scope,
            interactions=len(items),
            first_seq=items[0].seq,
            last_seq=items[-1].seq,
            usage=usage,
            outcome=outcome,
            error=None if error is None else f"{type(error).__name__}: {error}",
        )

    async def _call(self, transcript: str, progress: Progress | None) -> DistilledMemory:
        """Call the distiller: transient errors retry forever, bad answers `max_attempts` times.

        Without `progress` (a re-run someone waits for) a transient error is raised at once.
        The usage of failed tries is added to the answer's, or to the error that ends the tries.
        """
        backoff = Backoff(self.policy.backoff_initial, self.policy.backoff_max)
        attempts = 0
        spent = Usage()
        while True:
            try:
                memory = await self.distiller.distill(transcript)
            except LLMUnavailable as exc:
                if progress is None:
                    raise
                progress.set_state("waiting_for_llm", error=str(exc))
                pause = backoff.next()
                log.warning("llm_unavailable", observer=self.name, error=str(exc), retry_in=pause)
                await trio.sleep(pause)
                progress.set_state("distilling")
                continue
            except (InvalidAnswer, ContextOverflow) as exc:
                spent = add_usage(spent, exc.usage)
                attempts += 1
                if progress is not None:
                    progress.status.last_error = f"{type(exc).__name__}: {exc}"
                event = (
                    "llm_context_overflow"
                    if isinstance(exc, ContextOverflow)
                    else "llm_invalid_answer"
                )
                log.warning(event, observer=self.name, error=str(exc), attempt=attempts)
                if isinstance(exc, ContextOverflow) or attempts >= self.policy.max_attempts:
                    exc.usage = spent if spent.calls else None
                    raise
                continue
            memory.usage = add_usage(memory.usage, spent)
            return memory

    async def redistill(
        self, progress: Progress, first_seq: int = 0, last_seq: int = 2**63 - 1
    ) -> RedistillReport:
        """Distil the open dead letters in the seq range again, each alone, and commit what works.

        Results and resolved dead letters are committed in one transaction; the watermark stays.
        Raises `LLMUnavailable` (committing nothing) when the LLM cannot be reached.
        """
        async with self._redistilling:
            letters = await progress.store.open_dead_letters(self.name, first_seq, last_seq)
            out = _Collected(uuid.uuid4().hex[:16])
            results: list[RedistillResult] = []
            resolved: list[int] = []
            for letter in letters:
                item = letter.interaction
                failed = len(out.dead_letters)
                await self._distill_group(item.scope, [item], out, None)
                if len(out.dead_letters) > failed:
                    dead = out.dead_letters.pop()  # it stays open as it was; no second letter
                    results.append(
                        RedistillResult(item.seq, letter.id, "still_failing", 0, dead.reason)
                    )
                    continue
                resolved.append(letter.id)
                facts = len(out.results[-1].facts)
                results.append(RedistillResult(item.seq, letter.id, "redistilled", facts))
            renamed = {"committed": "redistilled", "dead_letter": "still_failing"}
            runs = [
                msgspec.structs.replace(r, outcome=renamed.get(r.outcome, r.outcome))
                for r in out.runs
            ]
            outcome = BatchOutcome(out.results, [], runs, None, resolved)
            if letters:
                await progress.commit_batch(outcome)
        report = RedistillReport(len(resolved), len(results) - len(resolved), results)
        log.info(
            "redistilled",
            observer=self.name,
            redistilled=report.redistilled,
            still_failing=report.still_failing,
        )
        return report
