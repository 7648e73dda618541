"""Every algorithm that reads untrusted text does work linear in it (or n log n): a line twice
as long costs at most about twice the calls, in every hostile shape (tests/hostile_text.py),
and a line of up to a megabyte is read whole, within a budget of calls per character."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forged.text.grounding import Sources, check
from tests.hostile_text import SHAPES, calls, hostile

DATE = "2023-05-08T13:56:00Z"
SMALL, LARGE = 8_000, 16_000  # a line and one twice as long: large enough that work dominates
MAX_GROWTH = 2.4  # doubling the input at most about doubles the work (n log n: 2.15 here)
MEGABYTE = 1_000_000


def _grounding(line: str) -> None:
    """A fact that copies its long source line, and a summary of it, checked."""
    sources = Sources.of([(1, DATE, f"user: {line}")], users={"user"})
    check(line, sources)
    check(line, sources, summary=True)


ALGORITHMS: dict[str, tuple[Callable[[str], object], int]] = {  # each with its calls per char
    "grounding": (_grounding, 40),
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_doubling_a_line_at_most_about_doubles_the_work(name: str, shape: str) -> None:
    """Calls for a 16,000-character line against an 8,000-character one of the same shape."""
    run, _ = ALGORITHMS[name]
    small = calls(lambda: run(hostile(shape, SMALL)))
    large = calls(lambda: run(hostile(shape, LARGE)))
    assert large <= MAX_GROWTH * small, (small, large)


@pytest.mark.slow
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(ALGORITHMS)),
    shape=st.sampled_from(SHAPES),
    chars=st.integers(1, MEGABYTE) | st.just(MEGABYTE),
    seed=st.integers(0, 2**16),
)
def test_a_line_of_up_to_a_megabyte_stays_within_its_budget(
    name: str, shape: str, chars: int, seed: int
) -> None:
    """Whatever its shape and length, a line costs at most its algorithm's calls per char."""
    run, per_char = ALGORITHMS[name]
    line = hostile(shape, chars, seed)
    assert calls(lambda: run(line)) <= per_char * len(line) + 10_000
