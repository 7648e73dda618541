"""Every algorithm that reads untrusted text does work linear in it (or n log n): a line twice
as long costs at most about twice the calls, in every hostile shape (tests/support/hostile_text.py),
and a line of up to a megabyte is read whole, within a budget of calls per character.

Work is counted in calls, never timed (see tests/support/hostile_text.py): the counts do not depend on
the machine or its load, so these tests cannot flake, and a quadratic loop still shows as a
four-fold growth."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forged.cli.importer import read_records
from forged.distill.batches import ground
from forged.distill.kinds import kind_of
from forged.distill.linepicker import pick_lines
from forged.distill.offline import distil
from forged.distill.salience import Line, scores
from forged.llm.prompt import render_chunks, render_transcript
from forged.models import (
    DistilledMemory,
    Fact,
    MemoryItem,
    Message,
    StoredInteraction,
    speaker_lines,
)
from forged.recall.packing import pack
from forged.recall.passages import passage
from forged.recall.query import SearchQuery, dropped_words, searched
from forged.recall.updates import newest_first
from forged.scrub.scan import scrub
from forged.text.grounding import Sources, check
from tests.support.data import recalled
from tests.support.hostile_text import RUNS, SHAPES, calls, hostile

DATE = "2023-05-08T13:56:00Z"
SMALL, LARGE = 4_000, 8_000  # a line and one twice as long: large enough that work dominates
MAX_GROWTH = 2.4  # doubling the input at most about doubles the work (n log n: 2.15 here)
MEGABYTE = 1_000_000
CASES = [(shape, 0) for shape in SHAPES if shape != "runs"] + [
    ("runs", i) for i in range(len(RUNS))
]


def _item(line: str) -> StoredInteraction:
    """One interaction: the user says the line, the assistant says it back."""
    messages = [Message("user", line), Message("assistant", line)]
    return StoredInteraction(1, "s", None, DATE, len(line) // 4, messages)


def _grounding(line: str) -> None:
    """A fact that restates its long source line (not word for word: a copy is grounded at
    once), and a summary of it, checked."""
    sources = Sources.of([(1, DATE, f"user: {line}")], users={"user"})
    check(f"The user said that {line}", sources)
    check(f"The user said that {line}", sources, summary=True)


def _offline(line: str) -> None:
    """The offline distiller end to end: render, pick by salience, ground what it picked."""
    item = _item(line)
    ground(distil(render_transcript([item]), 64), [item])


def _linepicker(line: str) -> None:
    pick_lines(render_transcript([_item(line)]), 64)


def _model_copy(line: str) -> None:
    """What a model that copies the line into its fact and its summary costs to ground."""
    item = _item(line)
    ground(DistilledMemory(line, [Fact("event", line)]), [item])


def _chunks(line: str) -> None:
    render_chunks(_item(line), 4096)


def _salience(line: str) -> None:
    scores([Line.of("user", line), Line.of("assistant", line), Line.of("user", "Wow!")])
    kind_of(line)


def _packing(line: str) -> None:
    item = MemoryItem(1, "fact", "event", "s", None, line, 1.0, DATE, DATE, 1, 1, DATE, DATE)
    pack([item, item], len(line))


def _passages(line: str) -> None:
    """A long turn's passage for a question, and two such turns ordered newest first."""
    text = speaker_lines([Message("user", line, "John"), Message("assistant", line)])
    turn = recalled(1, text, DATE, type="interaction", speaker="John, assistant")
    newest_first([passage(turn, line[:200]), turn], line[:200])


def _query(line: str) -> None:
    query = SearchQuery(line, "s", 10, max_words=len(line))
    searched(query)
    dropped_words(SearchQuery(line, "s", 10))


def _importing(line: str) -> None:
    turn = {"messages": [{"role": "user", "text": line}, {"role": "assistant", "text": line}]}
    read_records("jsonl", json.dumps(turn).encode())
    export = [
        {
            "uuid": "c",
            "chat_messages": [
                {"uuid": "m", "sender": "human", "text": line},
                {"uuid": "n", "sender": "assistant", "text": line},
            ],
        }
    ]
    read_records("claude", json.dumps(export).encode(), "s")


ALGORITHMS: dict[str, tuple[Callable[[str], object], int]] = {  # each with its calls per char
    "grounding": (_grounding, 40),
    "offline distiller": (_offline, 80),
    "line picker": (_linepicker, 20),
    "model's copy grounded": (_model_copy, 60),
    "chunks of a long turn": (_chunks, 5),
    "salience and kinds": (_salience, 20),
    "scrubbing": (scrub, 5),
    "packing": (_packing, 5),
    "query parsing": (_query, 5),
    "passages": (_passages, 20),
    "import": (_importing, 5),
}


@pytest.mark.parametrize(("shape", "seed"), CASES)
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_doubling_a_line_at_most_about_doubles_the_work(name: str, shape: str, seed: int) -> None:
    """Calls for an 8,000-character line against a 4,000-character one of the same shape."""
    run, _ = ALGORITHMS[name]
    short, long = hostile(shape, SMALL, seed), hostile(shape, LARGE, seed)
    small, large = calls(lambda: run(short)), calls(lambda: run(long))
    assert large <= MAX_GROWTH * small, (small, large)


@pytest.mark.slow
@pytest.mark.parametrize(("shape", "seed"), CASES)
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_megabyte_line_of_every_shape_stays_within_its_budget(
    name: str, shape: str, seed: int
) -> None:
    """Every algorithm reads a 1 MB line of every hostile shape within its calls per char
    (a few random lengths alone seldom meet the one shape an algorithm is slow on)."""
    run, per_char = ALGORITHMS[name]
    line = hostile(shape, MEGABYTE, seed)
    assert calls(lambda: run(line)) <= per_char * len(line) + 10_000


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
