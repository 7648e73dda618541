"""Retrying a model: one loop for every caller that asks an LLM (distilling, consolidating).

An unreachable LLM is waited for with backoff, indefinitely and without counting a try, or
raised at once when someone waits for the answer; an answer that is not valid memory is asked
for again up to `max_attempts` times. What failed tries cost is kept, on the answer or on the
error that ends the tries, so no call goes unaccounted.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import msgspec
import structlog
import trio

from forged.backoff import Backoff
from forged.config import DistillConfig
from forged.errors import ContextOverflow, DistillError, InvalidAnswer, LLMUnavailable
from forged.models import ObserverState, Usage

__all__ = ["UNWATCHED", "RetryPolicy", "StatusSink", "retried", "timed"]

T = TypeVar("T")

log = structlog.get_logger(__name__)


class RetryPolicy(msgspec.Struct, frozen=True):
    """How one request is retried: bad answers `max_attempts` times; an unreachable LLM is
    waited for with backoff when `wait_for_llm` (an observer), else raised at once (a re-run
    someone waits for)."""

    max_attempts: int
    backoff_initial: float
    backoff_max: float
    wait_for_llm: bool = True

    @classmethod
    def of(cls, config: DistillConfig) -> RetryPolicy:
        return cls(config.max_attempts, config.backoff_initial, config.backoff_max)


class StatusSink(Protocol):
    """Where the caller shows what it waits for: an observer's `Progress`, or nowhere."""

    def set_state(self, state: ObserverState, error: str | None = None) -> None: ...

    def note_error(self, error: str) -> None: ...

    def model_called(self, seconds: float, outcome: str) -> None: ...


class _Unwatched:
    """A status nobody shows: a re-run answers its caller directly."""

    def set_state(self, state: ObserverState, error: str | None = None) -> None:
        pass

    def note_error(self, error: str) -> None:
        pass

    def model_called(self, seconds: float, outcome: str) -> None:
        pass


UNWATCHED: StatusSink = _Unwatched()
# How a call to the model ended, as the metrics count it (the first class that matches).
_OUTCOMES: tuple[tuple[type[DistillError], str], ...] = (
    (LLMUnavailable, "unavailable"),
    (ContextOverflow, "context_overflow"),
    (InvalidAnswer, "invalid_answer"),
    (DistillError, "error"),
)


async def timed(status: StatusSink, call: Callable[[], Awaitable[T]]) -> T:
    """`call()`, a call to the model, counted with its outcome and how long it took."""
    started = time.monotonic()
    try:
        result = await call()
    except DistillError as exc:
        outcome = next(name for cls, name in _OUTCOMES if isinstance(exc, cls))
        status.model_called(time.monotonic() - started, outcome)
        raise
    status.model_called(time.monotonic() - started, "ok")
    return result


async def _wait_for_llm(
    exc: LLMUnavailable, backoff: Backoff, status: StatusSink, who: str
) -> None:
    status.set_state("waiting_for_llm", error=str(exc))
    pause = backoff.next()
    log.warning("llm_unavailable", observer=who, error=str(exc), retry_in=pause)
    await trio.sleep(pause)
    status.set_state("distilling")


async def retried(
    ask: Callable[[int], Awaitable[T]],
    policy: RetryPolicy,
    status: StatusSink,
    *,
    observer: str,
    retry_overflow: bool = False,
) -> tuple[T, Usage]:
    """`await ask(attempt)` (from 1) by the policy: the answer, and what the failed tries cost.

    The error that ends the tries carries their whole cost in `usage` (None without a call).
    A context overflow ends them at once unless `retry_overflow`: a caller that can split
    its request does better than asking the same again.
    """
    backoff = Backoff(policy.backoff_initial, policy.backoff_max)
    attempt, spent = 1, Usage()
    while True:
        try:
            return await ask(attempt), spent
        except LLMUnavailable as exc:
            if not policy.wait_for_llm:
                raise
            await _wait_for_llm(exc, backoff, status, observer)
        except (InvalidAnswer, ContextOverflow) as exc:
            spent += exc.usage
            status.note_error(f"{type(exc).__name__}: {exc}")
            overflow = isinstance(exc, ContextOverflow)
            event = "llm_context_overflow" if overflow else "llm_invalid_answer"
            log.warning(event, observer=observer, error=str(exc), attempt=attempt)
            if (overflow and not retry_overflow) or attempt >= policy.max_attempts:
                exc.usage = spent if spent.calls else None
                raise
            attempt += 1
