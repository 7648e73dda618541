"""Hostile text for the algorithms that read what clients send: lines of any length in the
shapes that make a careless algorithm super-linear, and a count of the work a call does.

Work is counted as function calls (Python's and built-in ones, through cProfile), not time: the
same input makes the same calls on every run and every machine, so a test that compares the work
of a line and of one twice as long cannot flake on a loaded machine, yet still sees a loop over
pairs (its calls grow four-fold). Calls made inside C (a regex scan, a set operation) are not
counted one by one; each is one call, and none of the algorithms loops in C over pairs.
"""

from __future__ import annotations

import cProfile
import random
from collections.abc import Callable

SHAPES = ("unpunctuated", "one word", "names and numbers", "mixed scripts", "runs")
# What "runs" repeats, by seed: each makes some pattern retry at every place of a long run
# (spaces, stops, speaker labels, photo captions, cue words, clause breaks).
RUNS = (" ", ". ", "a: ", "[shares ", "please ", " but ", "\t-", "((", "_")
_WORDS = [
    "garden",
    "silver",
    "market",
    "window",
    "planet",
    "yellow",
    "orange",
    "river",
    "station",
    "coffee",
]
_NAMES = ["Alice", "Bob", "Caroline", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy"]
# Latin, Cyrillic, Greek, CJK, Arabic, emoji, with punctuation between some of them.
_PIECES = (
    "東京の会社",
    "Alice",
    " 42 ",
    "мир, ",
    "λόγος ",
    "日本語の文章。",
    "Bob. ",
    "مرحبا ",
    "🙂 ",
    "water; ",
)


def hostile(shape: str, chars: int, seed: int = 0) -> str:
    """A line of `chars` characters of that shape (SHAPES), the same for the same seed; it
    starts and ends with a letter (a run of spaces is not stripped away)."""
    rng = random.Random(seed)
    if shape == "unpunctuated":
        piece = lambda: rng.choice(_WORDS) + " "  # noqa: E731 - one line per shape reads best
    elif shape == "one word":
        piece = lambda: "buffalo "  # noqa: E731
    elif shape == "names and numbers":
        piece = lambda: f"{rng.choice(_NAMES)} {rng.randint(1, 9999)} "  # noqa: E731
    elif shape == "mixed scripts":
        piece = lambda: rng.choice(_PIECES)  # noqa: E731
    elif shape == "runs":
        run = RUNS[seed % len(RUNS)]
        piece = lambda: run  # noqa: E731
    else:
        raise ValueError(shape)
    parts: list[str] = []
    size = 0
    while size < chars:
        parts.append(piece())
        size += len(parts[-1])
    return "x" + "".join(parts)[: max(chars - 2, 0)] + "y"


def calls(work: Callable[[], object]) -> int:
    """How many function calls `work` makes: a measure of its work that does not vary."""
    profile = cProfile.Profile()
    profile.runcall(work)
    return sum(entry.callcount for entry in profile.getstats())
