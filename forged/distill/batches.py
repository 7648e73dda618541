"""Distilling: batches of interactions become summaries and typed facts.

`BatchDistiller` is the work (a batch in, a `BatchOutcome` out, retries by forged.llm.retry); it
commits nothing. The observer loop that feeds it and commits is forged.distill.observer;
re-runs of dead letters live in forged.distill.deadletters.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from itertools import groupby
from typing import NamedTuple

import msgspec
import structlog

from forged.errors import CheckOverrun, ContextOverflow, DistillError, InvalidAnswer
from forged.llm.distiller import Distiller
from forged.llm.prompt import (
    message_lines,
    render_chunks,
    render_known,
    render_transcript,
    speaker,
)
from forged.llm.retry import RetryPolicy, StatusSink, retried, timed
from forged.models import (
    DISTILL_OBSERVER,
    SUPERSEDING_KINDS,
    DistilledMemory,
    Fact,
    LinePick,
    MemoryItem,
    StoredInteraction,
    Usage,
    normalise,
)
from forged.store.records import BatchOutcome, DeadLetter, DistillRun, ScopeResult
from forged.text.grounding import SUBJECT_MIN_OVERLAP, Sources, check, subject_share
from forged.text.offload import Offload, WorkerProcess

__all__ = [
    "FIRST_RUN",
    "RAW_LIMIT",
    "RERUN",
    "BatchDistiller",
    "Distilled",
    "Grounded",
    "Outcomes",
    "Related",
    "ground",
    "merge",
    "new_batch_id",
    "replacing",
]

RAW_LIMIT = 16_384  # characters of a failed answer kept with its dead letter
MAX_REPLACED = 3  # known facts one new fact may retire: a correction, not a sweep
# What the model's answer or the transcript may make the work give up on: split, then dead-letter
_SPLIT = (ContextOverflow, InvalidAnswer, CheckOverrun)
# The scope's current facts recall finds for a text: shown beside the transcript (supersession).
Related = Callable[[str, str], Awaitable[list[MemoryItem]]]

log = structlog.get_logger(__name__)


def merge(memories: list[DistilledMemory], max_facts: int) -> DistilledMemory:
    """One memory from the chunks of one interaction: summaries joined, facts de-duplicated."""
    facts: dict[tuple[str, str], Fact] = {}
    for memory in memories:
        for fact in memory.facts:
            facts.setdefault((fact.kind, normalise(fact.text)), fact)
    usage = sum((m.usage for m in memories), Usage())
    summary = "\n".join(m.summary.strip() for m in memories if m.summary.strip())
    picks = list(dict.fromkeys(p for m in memories for p in m.picks))
    return DistilledMemory(summary, list(facts.values())[:max_facts], usage, picks[:max_facts])


def _picked(picks: list[LinePick], items: list[StoredInteraction]) -> tuple[list[Fact], int]:
    """The picked lines as facts, verbatim with their speaker; and how many named no line."""
    lines = {(i.seq, n): line for i in items for n, line in enumerate(message_lines(i), start=1)}
    facts = [
        Fact(
            p.kind,
            f"{lines[p.seq, p.line][0]}: {lines[p.seq, p.line][1].strip()}",
            [p.seq],
            list(p.replaces),
        )
        for p in picks
        if (p.seq, p.line) in lines
    ]
    return facts, len(picks) - len(facts)


class Grounded(NamedTuple):
    """What grounding keeps of an answer, and what it drops: (kind, text, reason) each."""

    summary: str
    facts: list[Fact]
    dropped: list[tuple[str, str, str | None]]
    unknown_picks: int  # picks naming no line of the transcript


def ground(memory: DistilledMemory, items: list[StoredInteraction]) -> Grounded:
    """The summary and facts the interactions support, each fact with its sources, and what was
    dropped (see forged.text.grounding). Picked lines become facts here. Pure, so that it can
    run in a worker process (forged.text.offload); the caller logs what was dropped."""
    sources = Sources.of(
        (
            (i.seq, i.timestamp, "\n".join(f"{who}: {text}" for who, text in message_lines(i)))
            for i in items
        ),
        users={speaker(m.role, m.name) for i in items for m in i.messages if m.role == "user"},
    )
    picked, unknown = _picked(memory.picks, items)
    facts: list[Fact] = []
    dropped: list[tuple[str, str, str | None]] = []
    for fact in [*memory.facts, *picked]:
        verdict = check(fact.text, sources)
        if verdict.grounded:
            facts.append(Fact(fact.kind, fact.text, fact.sources or verdict.sources, fact.replaces))
        else:
            dropped.append((fact.kind, fact.text[:200], verdict.reason))
    summary = memory.summary.strip()
    if summary and not (verdict := check(summary, sources, summary=True)).grounded:
        dropped.append(("summary", summary[:200], verdict.reason))
        summary = ""
    return Grounded(summary, facts, dropped, unknown)


def _log_dropped(grounded: Grounded) -> int:
    """Log each dropped item; how many were dropped, picks of no line included."""
    for kind, text, reason in grounded.dropped:
        log.info("ungrounded", kind=kind, text=text, reason=reason)
    return len(grounded.dropped) + grounded.unknown_picks


def with_sessions(facts: list[Fact], items: list[StoredInteraction]) -> list[Fact]:
    """The facts, each with the session of its sources when they share one (a batch spanning
    sessions still gives each fact the session it was said in)."""
    session_of = {i.seq: i.session for i in items}
    out = []
    for fact in facts:
        sessions = {session_of.get(seq) for seq in fact.sources}
        one = sessions.pop() if len(sessions) == 1 else None
        out.append(msgspec.structs.replace(fact, session=one))
    return out


def replacing(facts: list[Fact], known: list[MemoryItem]) -> list[Fact]:
    """The facts with only the replacements forged stands behind: a state, preference or
    correction replacing facts it was shown, other than itself, about the same subject (they
    share SUBJECT_MIN_OVERLAP of their content words), at most MAX_REPLACED of them."""
    shown = {f.id: f.text for f in known}
    out = []
    for fact in facts:
        ids = [i for i in fact.replaces if i in shown and shown[i] != fact.text]
        ids = [i for i in ids if subject_share(shown[i], fact.text) >= SUBJECT_MIN_OVERLAP]
        ids = ids[:MAX_REPLACED] if fact.kind in SUPERSEDING_KINDS else []
        if len(ids) < len(fact.replaces):
            log.info(
                "replaces_refused",
                kind=fact.kind,
                text=fact.text[:200],
                named=len(fact.replaces),
                kept=len(ids),
            )
        out.append(msgspec.structs.replace(fact, replaces=ids))
    return out


async def _known(
    related: Related | None, scope: str, items: list[StoredInteraction]
) -> list[MemoryItem]:
    """The scope's current facts related to what the items say (none without `related`)."""
    if related is None:
        return []
    said = "\n".join(text for i in items for _, text in message_lines(i))
    return await related(scope, said)


class Outcomes(NamedTuple):
    """How a run is recorded when it commits results, and when it gives up on an interaction."""

    done: str
    failed: str


FIRST_RUN = Outcomes("committed", "dead_letter")
RERUN = Outcomes("redistilled", "still_failing")  # dead letters distilled again


def new_batch_id() -> str:
    return uuid.uuid4().hex[:16]


class Distilled:
    """What the work produced for a batch or a group: results, interactions given up on, runs."""

    def __init__(self) -> None:
        self.results: list[ScopeResult] = []
        self.failed: list[DeadLetter] = []
        self.runs: list[DistillRun] = []


class BatchDistiller:
    """Distils interactions scope by scope: splits in halves what the model cannot handle,
    chunks one interaction over the budget, retries by the policy. Commits nothing."""

    def __init__(
        self,
        distiller: Distiller,
        retry: RetryPolicy,
        max_batch_tokens: int,
        max_facts: int,
        related: Related | None = None,
        offload: Offload | None = None,
    ) -> None:
        self.distiller = distiller
        self.retry = retry
        self.max_batch_tokens = max_batch_tokens
        self.max_facts = max_facts
        self.related = related  # known facts a new one may replace (supersession)
        self.offload = offload or WorkerProcess()  # renders and grounds, off the event loop

    def rerunning(self) -> BatchDistiller:
        """The same work for a re-run someone waits for: an unreachable LLM is raised at once."""
        retry = msgspec.structs.replace(self.retry, wait_for_llm=False)
        return BatchDistiller(
            self.distiller,
            retry,
            self.max_batch_tokens,
            self.max_facts,
            self.related,
            self.offload,
        )

    async def distill_batch(
        self, batch: list[StoredInteraction], status: StatusSink
    ) -> BatchOutcome:
        """Distil a batch scope by scope; the outcome carries everything to commit."""
        out, batch_id = Distilled(), new_batch_id()
        for scope, items in groupby(sorted(batch, key=lambda i: i.scope), key=lambda i: i.scope):
            await self.distill_group(batch_id, scope, list(items), out, status)
        return BatchOutcome(out.results, out.failed, out.runs, watermark=batch[-1].seq)

    async def distill_group(
        self,
        batch_id: str,
        scope: str,
        items: list[StoredInteraction],
        out: Distilled,
        status: StatusSink,
        outcomes: Outcomes = FIRST_RUN,
    ) -> None:
        """Distil one scope's interactions into `out`; split in halves what the model cannot
        handle, give up on an interaction that fails alone."""
        known = await _known(self.related, scope, items)
        try:
            memory = await self._distill_items(items, status, render_known(known))
            grounded = await self._ground(memory, items)
        except _SPLIT as exc:
            await self._split(batch_id, scope, items, exc, out, status, outcomes)
            return
        ungrounded = _log_dropped(grounded)
        facts = with_sessions(replacing(grounded.facts, known), items)
        if ungrounded:
            log.warning(
                "ungrounded_dropped", observer=DISTILL_OBSERVER, scope=scope, dropped=ungrounded
            )
        sessions = {i.session for i in items}
        session = sessions.pop() if len(sessions) == 1 else None
        out.results.append(
            ScopeResult(
                batch_id, scope, session, grounded.summary, facts, items[0].seq, items[-1].seq
            )
        )
        run = self._run(batch_id, scope, items, memory.usage, outcomes.done)
        out.runs.append(msgspec.structs.replace(run, ungrounded=ungrounded))

    async def _split(
        self,
        batch_id: str,
        scope: str,
        items: list[StoredInteraction],
        exc: DistillError,
        out: Distilled,
        status: StatusSink,
        outcomes: Outcomes,
    ) -> None:
        """Distil each half of what failed on its own; give up on an interaction that failed
        alone."""
        if len(items) == 1:
            self._give_up(batch_id, items[0], exc, out, outcomes)
            return
        log.warning(
            "batch_split",
            observer=DISTILL_OBSERVER,
            scope=scope,
            interactions=len(items),
            reason=str(exc),
        )
        if exc.usage is not None:  # the failed tries cost something: keep the account
            out.runs.append(self._run(batch_id, scope, items, exc.usage, "split", exc))
        half = len(items) // 2
        for part in (items[:half], items[half:]):
            await self.distill_group(batch_id, scope, part, out, status, outcomes)

    async def _ground(self, memory: DistilledMemory, items: list[StoredInteraction]) -> Grounded:
        """What the items support of the answer, checked in the worker under its deadline."""
        try:
            return await self.offload.run(ground, memory, items)
        except CheckOverrun as exc:
            exc.usage = memory.usage  # the answer was paid for: the split keeps the account
            raise

    async def _distill_items(
        self, items: list[StoredInteraction], status: StatusSink, known: str = ""
    ) -> DistilledMemory:
        """One call for the items, or one per chunk of a single interaction over the budget;
        the `known` facts go before each transcript."""
        budget = self.max_batch_tokens
        if len(items) > 1 or items[0].tokens <= budget:
            rendered = await self.offload.run(render_transcript, items)
            return await self._call(known + rendered, status)
        parts = await self.offload.run(render_chunks, items[0], budget)
        chunks = [known + chunk for chunk in parts]
        log.info(
            "interaction_chunked", observer=DISTILL_OBSERVER, seq=items[0].seq, chunks=len(chunks)
        )
        memories: list[DistilledMemory] = []
        for chunk in chunks:
            try:
                memories.append(await self._call(chunk, status))
            except DistillError as exc:  # the chunks done so far were paid for too
                spent = merge(memories, self.max_facts).usage
                exc.usage = spent + exc.usage
                raise
        return merge(memories, self.max_facts)

    def _give_up(
        self,
        batch_id: str,
        item: StoredInteraction,
        exc: DistillError,
        out: Distilled,
        outcomes: Outcomes,
    ) -> None:
        reason = f"{type(exc).__name__}: {exc}"
        raw = None if exc.raw is None else exc.raw[:RAW_LIMIT]
        log.error("dead_letter", observer=DISTILL_OBSERVER, seq=item.seq, reason=reason)
        out.failed.append(DeadLetter(seq=item.seq, reason=reason, raw=raw))
        usage = exc.usage or Usage()
        out.runs.append(self._run(batch_id, item.scope, [item], usage, outcomes.failed, exc))

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

    async def _call(self, transcript: str, status: StatusSink) -> DistilledMemory:
        """Call the distiller by the retry policy, telling it which attempt this is; the usage
        of failed tries is added to the answer's, or to the error that ends the tries."""
        memory, spent = await retried(
            lambda attempt: timed(
                status, partial(self.distiller.distill, transcript, attempt=attempt)
            ),
            self.retry,
            status,
            observer=DISTILL_OBSERVER,
        )
        memory.usage += spent
        return memory
