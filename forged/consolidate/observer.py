"""The `consolidate` observer: runs consolidation (forged.consolidate) over each scope that gained
facts, condenses the scope's older summaries into one (forged.consolidate.condense), keeps to the hourly call
budget, and answers `POST /v1/consolidate`.

A run's changes, its cost and the scope's progress commit in one transaction, so a run cut short
by a crash is done again from the start and nothing is applied twice.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import msgspec
import structlog
import trio

from forged.config import ConsolidateConfig
from forged.consolidate import condense
from forged.consolidate.judgement import (
    TASK,
    CurrentFact,
    ProposedChange,
    Proposer,
    checked,
    chunks,
    parse_changes,
    render_facts,
)
from forged.errors import BudgetSpent, CheckOverrun, ContextOverflow, InvalidAnswer
from forged.hub import Feed, Progress
from forged.llm.distiller import Task
from forged.llm.retry import RetryPolicy, retried, timed
from forged.models import Condensed, ConsolidationChange, ConsolidationRun, Usage
from forged.store import consolidation
from forged.text.grounding import Verdict
from forged.text.offload import WorkerProcess
from forged.timestamps import utc_text

if TYPE_CHECKING:
    from forged.store.backend import Backend

__all__ = ["FEED_BATCH", "HOUR", "NAME", "Asker", "ConsolidateObserver"]

NAME = "consolidate"  # the observer's name: its status, its progress rows, its log
HOUR = 3600.0  # the window of `max_calls_per_hour`
FEED_BATCH = 256  # interactions passed over per watermark commit

T = TypeVar("T")

log = structlog.get_logger(__name__)


class Asker(Protocol):
    """An LLM client that answers a task other than distilling (`OpenAIDistiller` is one)."""

    model: str

    async def ask(self, task: Task, user: str) -> tuple[str, Usage]: ...


def _plugin_name(proposer: Proposer) -> str:
    """A plugin's import path, recorded as the `model` of its runs."""
    return f"{type(proposer).__module__}:{type(proposer).__qualname__}"


def _due(conn: Any, config: ConsolidateConfig, min_new: int) -> list[str]:
    waited_since = utc_text(datetime.now(UTC) - timedelta(seconds=config.max_wait))
    return consolidation.due_scopes(conn, NAME, min_new, waited_since)


def _current(conn: Any, scope: str) -> list[CurrentFact]:
    return [CurrentFact(*row) for row in consolidation.current_facts(conn, scope)]


class ConsolidateObserver:
    """Wakes for scopes that gained facts; consolidates each, one run at a time."""

    name = NAME

    def __init__(
        self,
        llm: Asker | None,
        config: ConsolidateConfig,
        retry: RetryPolicy,
        max_summary_chars: int,
        store: Backend,
        proposer: Proposer | None = None,
    ) -> None:
        self.llm = llm  # condenses summaries, and judges facts unless a plugin does (None: neither)
        self.proposer = proposer
        self.model = _plugin_name(proposer) if proposer is not None else getattr(llm, "model", "")
        self.config = config
        self.worker = WorkerProcess()  # checks the model's text against the summaries
        self.retry = retry  # bad answers and backoff, as for distilling
        self.max_summary_chars = (
            max_summary_chars  # a condensed summary's cap, as a distilled one's
        )
        self.store = store
        self._calls: deque[float] = deque()  # when the calls of the last hour were made
        self._running = trio.Lock()  # one run at a time: a scope is never consolidated twice

    async def run(self, interactions: Feed, progress: Progress) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._pass_over, interactions, progress)
            while True:
                if not progress.stopping:
                    due = await self.store.read(_due, self.config, self.config.min_new_facts)
                    for scope in due:
                        if not progress.stopping:
                            await self.consolidate(scope, progress, patient=True)
                await trio.sleep(self.config.check_interval)

    @staticmethod
    async def _pass_over(interactions: Feed, progress: Progress) -> None:
        """Interactions are not this observer's input: its watermark follows the log."""
        while True:
            seq = (await interactions.receive()).seq
            for _ in range(FEED_BATCH):
                try:
                    seq = interactions.receive_nowait().seq
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            await progress.commit(seq)

    async def due(self) -> list[str]:
        """Every scope with a current fact newer than its last run."""
        return await self.store.read(_due, self.config, 1)

    async def consolidate(
        self, scope: str, progress: Progress, *, patient: bool
    ) -> ConsolidationRun:
        """One run over a scope's current facts, committed with its progress; what it applied.

        Not `patient` (someone waits for the answer): an unreachable LLM or a spent budget
        raises at once, and nothing is committed.
        """
        async with self._running:
            progress.set_state("distilling")
            try:
                proposed = await self._run(scope, progress, patient)
                applied = await progress.commit_with(
                    lambda: self.store.commit_consolidation(self.name, proposed)
                )
            finally:
                progress.set_state("idle")
        run = msgspec.structs.replace(proposed, changes=applied)
        log.info(
            "consolidation_committed",
            observer=self.name,
            run_id=run.run_id,
            scope=scope,
            facts=run.facts,
            proposed=len(proposed.changes),
            applied=len(applied),
            llm_calls=run.usage.calls,
            llm_ms=run.usage.ms,
        )
        return run

    async def _run(self, scope: str, progress: Progress, patient: bool) -> ConsolidationRun:
        facts = await self.store.read(_current, scope)
        changes: list[ConsolidationChange] = []
        retired: set[int] = set()
        usage = Usage()
        for chunk in chunks(facts, self.config.facts_per_call, self.config.max_prompt_tokens):
            chunk = [f for f in chunk if f.id not in retired]
            if len(chunk) < 2:
                continue
            proposed, spent = await self._ask(self._proposal(scope, chunk), progress, patient)
            usage += spent
            changes += checked(proposed or [], chunk, retired, self.config.max_reason_chars)
        condensed, spent, ungrounded = await self._condense(scope, progress, patient)
        return ConsolidationRun(
            run_id=uuid.uuid4().hex[:16],
            model=self.model,
            scope=scope,
            facts=len(facts),
            through_fact_id=max((f.id for f in facts), default=0),
            changes=changes,
            usage=usage + spent,
            ungrounded=ungrounded,
            condensed=condensed,
        )

    async def _condense(
        self, scope: str, progress: Progress, patient: bool
    ) -> tuple[Condensed | None, Usage, int]:
        """The scope's oldest summaries past `keep_summaries` as one (None when fewer than two
        or the answer is not grounded in them), its cost, and 1 if the grounding check dropped it."""
        old = await self.store.read(condense.old_summaries, scope, self.config.keep_summaries)
        old = condense.fitting(old, self.config.max_prompt_tokens)
        if len(old) < 2 or self.llm is None:
            return None, Usage(), 0
        asked = self._asked(condense.TASK, condense.render_summaries(old), condense.parse_summary)
        text, spent = await self._ask(asked, progress, patient)
        if not text:
            return None, spent, 0
        try:
            verdict = await self.worker.run(condense.grounded, text, old)
        except CheckOverrun as exc:  # not shown to hold: as if it did not
            verdict = Verdict([], str(exc))
        if not verdict.grounded:
            log.info("ungrounded", kind="condensed_summary", text=text[:200], reason=verdict.reason)
            return None, spent, 1
        return Condensed([s.id for s in old], text[: self.max_summary_chars]), spent, 0

    async def _budget(self, patient: bool) -> None:
        """Wait (or, impatient, raise) until a call fits `max_calls_per_hour`; then count it."""
        while True:
            now = time.monotonic()
            while self._calls and self._calls[0] <= now - HOUR:
                self._calls.popleft()
            if len(self._calls) < self.config.max_calls_per_hour:
                self._calls.append(now)
                return
            wait = self._calls[0] + HOUR - now
            if not patient:
                raise BudgetSpent(wait)
            log.info("consolidation_budget_spent", observer=self.name, resume_in=round(wait))
            await trio.sleep(wait)

    def _proposal(
        self, scope: str, chunk: list[CurrentFact]
    ) -> Callable[[], Awaitable[tuple[list[ProposedChange], Usage]]]:
        """One request for a chunk's changes: to the plugin when there is one, else to the LLM."""
        if self.proposer is None:
            return self._asked(TASK, render_facts(chunk), parse_changes)
        proposer = self.proposer

        async def proposed() -> tuple[list[ProposedChange], Usage]:
            start = time.monotonic()
            answer = await proposer.propose(scope, list(chunk))
            usage = Usage(ms=round((time.monotonic() - start) * 1000), calls=1)
            try:  # a plugin's answer is checked as strictly as the LLM's
                return msgspec.convert(answer, list[ProposedChange], from_attributes=True), usage
            except msgspec.ValidationError as exc:
                raise InvalidAnswer(
                    f"the plugin's answer is not a list of changes: {exc}", usage=usage
                ) from exc

        return proposed

    def _asked(
        self, task: Task, user: str, parse: Callable[[str, Usage], T]
    ) -> Callable[[], Awaitable[tuple[T, Usage]]]:
        """One request to the LLM, its answer parsed."""
        llm = self.llm
        assert llm is not None  # the daemon builds no observer without an LLM or a plugin

        async def asked() -> tuple[T, Usage]:
            content, usage = await llm.ask(task, user)
            return parse(content, usage), usage

        return asked

    async def _ask(
        self,
        request: Callable[[], Awaitable[tuple[T, Usage]]],
        progress: Progress,
        patient: bool,
    ) -> tuple[T | None, Usage]:
        """The parsed answer to one request, with retries as for distilling, and its cost.

        Each try waits for the hourly budget first. An unreachable LLM is waited for (patient)
        or raised; an invalid answer is asked again up to `max_attempts` times, then None: what
        was asked about is left as it is.
        """

        async def budgeted(_attempt: int) -> tuple[T, Usage]:
            await self._budget(patient)
            return await timed(progress, request)

        policy = msgspec.structs.replace(self.retry, wait_for_llm=patient)
        try:
            (answer, usage), spent = await retried(
                budgeted, policy, progress, observer=self.name, retry_overflow=True
            )
        except (InvalidAnswer, ContextOverflow) as exc:
            return None, exc.usage or Usage()
        return answer, spent + usage
