"""Backoff: the growing, jittered pause of every loop in forged that retries."""

from __future__ import annotations

import random

__all__ = ["JITTER", "Backoff"]

JITTER = 0.5  # a pause is drawn from [JITTER x delay, delay], so retrying parties drift apart


class Backoff:
    """Exponential delays from `initial` doubling up to `maximum`; `reset()` starts over."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self._delay = initial

    def next(self) -> float:
        """The pause before the next try; the one after it is twice as long, up to `maximum`."""
        pause = self._delay * random.uniform(JITTER, 1.0)
        self._delay = min(self._delay * 2, self.maximum)
        return pause

    def reset(self) -> None:
        """Start again from `initial` (after a success)."""
        self._delay = self.initial
