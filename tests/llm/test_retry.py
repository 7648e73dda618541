"""Tests for forged.llm.retry: the one loop distilling and consolidating ask a model through."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import pytest
import trio
from structlog.testing import capture_logs

from forged.errors import ContextOverflow, InvalidAnswer, LLMUnavailable
from forged.llm.retry import UNWATCHED, RetryPolicy, retried, timed
from forged.models import ObserverState, Usage

POLICY = RetryPolicy(3, 0.01, 0.01)
COST = Usage(10, 2, 5, 1)  # what one failed call costs here


class Status:
    """A status sink that remembers what it was shown."""

    def __init__(self) -> None:
        self.states: list[ObserverState] = []
        self.errors: list[str] = []
        self.calls: list[str] = []  # the outcomes `timed` counted

    def set_state(self, state: ObserverState, error: str | None = None) -> None:
        self.states.append(state)

    def note_error(self, error: str) -> None:
        self.errors.append(error)

    def model_called(self, seconds: float, outcome: str) -> None:
        self.calls.append(outcome)


def _failing(*errors: Exception) -> tuple[list[int], Callable[[int], Awaitable[str]]]:
    """An `ask` that raises the errors in turn, then answers "ok"; and the attempts it saw."""
    attempts: list[int] = []

    async def ask(attempt: int) -> str:
        attempts.append(attempt)
        if len(attempts) <= len(errors):
            raise errors[len(attempts) - 1]
        return "ok"

    return attempts, ask


def test_usage_adds_field_by_field() -> None:
    """Two sets of calls cost their sum; adding None adds nothing."""
    assert Usage(1, 2, 3, 1) + Usage(10, 20, 30, 2) == Usage(11, 22, 33, 3)
    assert Usage(1, 2, 3, 1) + None == Usage(1, 2, 3, 1)


async def test_a_bad_answer_is_asked_again_and_its_cost_kept(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The second try answers; the first's cost comes back beside the answer."""
    attempts, ask = _failing(InvalidAnswer("not JSON", usage=COST))
    status = Status()
    answer, spent = await retried(ask, POLICY, status, observer="x")
    assert (answer, spent, attempts) == ("ok", COST, [1, 2])
    assert status.errors == ["InvalidAnswer: not JSON"]


async def test_the_last_bad_answer_raises_with_every_tries_cost() -> None:
    """After `max_attempts` bad answers the last error carries what all of them cost."""
    attempts, ask = _failing(*[InvalidAnswer("bad", usage=COST) for _ in range(3)])
    with capture_logs() as logs, pytest.raises(InvalidAnswer) as raised:
        await retried(ask, POLICY, UNWATCHED, observer="x")
    assert attempts == [1, 2, 3]
    assert raised.value.usage == COST + COST + COST
    assert [e["attempt"] for e in logs if e["event"] == "llm_invalid_answer"] == [1, 2, 3]


async def test_an_overflow_ends_the_tries_unless_asked_again() -> None:
    """A caller that can split gets the overflow at once; one that cannot asks again."""
    attempts, ask = _failing(ContextOverflow("too long"))
    with pytest.raises(ContextOverflow) as raised:
        await retried(ask, POLICY, UNWATCHED, observer="x")
    assert attempts == [1]
    assert raised.value.usage is None  # no call was answered: nothing to account
    attempts, ask = _failing(ContextOverflow("too long"))
    answer, _ = await retried(ask, POLICY, UNWATCHED, observer="x", retry_overflow=True)
    assert (answer, attempts) == ("ok", [1, 2])


async def test_an_unreachable_llm_is_waited_for_without_counting_a_try(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Five outages in a row, then an answer: still the first attempt, the status shown."""
    attempts, ask = _failing(*[LLMUnavailable("refused") for _ in range(5)])
    status = Status()
    answer, spent = await retried(ask, POLICY, status, observer="x")
    assert (answer, spent, attempts) == ("ok", Usage(), [1] * 6)
    assert status.states == ["waiting_for_llm", "distilling"] * 5


async def test_an_unreachable_llm_is_raised_at_once_when_someone_waits() -> None:
    """`wait_for_llm=False` (a re-run answering a client): the outage is the answer."""
    attempts, ask = _failing(LLMUnavailable("refused"))
    policy = RetryPolicy(3, 0.01, 0.01, wait_for_llm=False)
    with pytest.raises(LLMUnavailable):
        await retried(ask, policy, UNWATCHED, observer="x")
    assert attempts == [1]


async def test_each_call_is_counted_with_its_outcome() -> None:
    """`timed` tells the status how each call to the model ended, errors as their kind."""
    status = Status()
    _, ask = _failing(ContextOverflow("long"), InvalidAnswer("bad"), LLMUnavailable("down"))
    for attempt in (1, 2, 3):
        with pytest.raises((ContextOverflow, InvalidAnswer, LLMUnavailable)):
            await timed(status, partial(ask, attempt))
    assert await timed(status, partial(ask, 4)) == "ok"
    assert status.calls == ["context_overflow", "invalid_answer", "unavailable", "ok"]
