"""Scrub: secret scrubbing per interaction, one prefilter scan against every rule on every string."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from bench.corpus import Turn
from bench.report import Goal, Row
from bench.sizes import Context
from forged.scrub import prefilter
from forged.scrub.scan import ANCHORS, Scrubber, scrub_all, scrub_exact

ROUNDS = 3  # the best of this many passes over the interactions is reported
ONE_TENTH = Goal(0.1, at_least=False)  # the fast path's cost against exact matching


def _strings(turns: list[Turn], n: int) -> list[list[str]]:
    """What ingest scrubs of each interaction: id, scope, session, speaker name and text."""
    picked = [turns[i % len(turns)] for i in range(n)]
    return [[f"bench-{i}", t.scope, t.session, t.speaker, t.text] for i, t in enumerate(picked)]


def _us_per_interaction(
    scrub: Callable[[Sequence[str]], list[str]], interactions: list[list[str]]
) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for strings in interactions:
            scrub(strings)
        best = min(best, time.perf_counter() - started)
    return best / len(interactions) * 1e6


def _exact(strings: Sequence[str]) -> list[str]:
    return [scrub_exact(s) for s in strings]


async def measure(ctx: Context, turns: list[Turn]) -> list[Row]:
    """µs per interaction: the fast path and the stdlib fallback, each against exact matching."""
    interactions = _strings(turns, ctx.size.scrub)
    fallback = Scrubber(prefilter.StdlibPrefilter(ANCHORS)).scrub_all
    exact = _us_per_interaction(_exact, interactions)
    baseline = "every rule on every string"
    return [
        Row(
            f"scrub: per interaction, {prefilter.best(ANCHORS).name} prefilter",
            _us_per_interaction(scrub_all, interactions),
            "µs",
            baseline,
            exact,
            goal=ONE_TENTH,
        ),
        Row(
            "scrub: per interaction, stdlib fallback",
            _us_per_interaction(fallback, interactions),
            "µs",
            baseline,
            exact,
        ),
    ]
