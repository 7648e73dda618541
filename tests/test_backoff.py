"""Backoff: pauses double up to the maximum, each jittered below its delay; reset starts over."""

from __future__ import annotations

import random

from forged.backoff import JITTER, Backoff


def test_pauses_double_up_to_the_maximum_with_jitter_below_each_delay() -> None:
    """The n-th pause lies in [JITTER x d, d] for d = initial x 2^n, capped at the maximum."""
    random.seed(1)
    backoff = Backoff(1.0, 5.0)
    pauses = [backoff.next() for _ in range(6)]
    for pause, delay in zip(pauses, [1.0, 2.0, 4.0, 5.0, 5.0, 5.0], strict=True):
        assert JITTER * delay <= pause <= delay


def test_reset_starts_again_from_the_initial_delay() -> None:
    """After a success the next pause is as short as the first."""
    backoff = Backoff(0.1, 10.0)
    for _ in range(5):
        backoff.next()
    backoff.reset()
    assert backoff.next() <= 0.1
