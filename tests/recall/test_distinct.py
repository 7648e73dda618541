"""Search's answer, one place per turn: a fact and the turn it was taken from are one memory."""

from __future__ import annotations

import msgspec
import pytest

from forged.config import RecallConfig
from forged.models import Fact, MemoryItem
from forged.recall import distinct
from forged.recall.distinct import one_per_turn, said_in
from forged.recall.engine import Recall
from forged.recall.fusion import plain
from forged.recall.query import SearchQuery
from forged.store.records import BatchOutcome, ScopeResult
from tests.conftest import StoreOpener
from tests.support.data import new, recalled

AT = "2023-05-08T13:56:00Z"


def _item(type_: str, n: int, first: int, last: int | None = None) -> MemoryItem:
    """A turn's text holds the words "said <seq>"; a fact's is them, or another's."""
    end = first if last is None else last
    text = f"turn {n}: said {first}" if type_ == "interaction" else f"said {first}"
    return recalled(n, text, AT, type=type_, first=first, last_seq=end)


def _names(items: list[MemoryItem]) -> list[str]:
    return [i.text for i in items]


def test_a_fact_below_its_own_turn_gives_its_place_to_the_next() -> None:
    """The turn ranked first says what its fact says: the fact goes, the next item comes in."""
    found = [_item("interaction", 1, 1), _item("fact", 7, 1), _item("interaction", 2, 2)]
    assert _names(one_per_turn(found, 2)) == ["turn 1: said 1", "turn 2: said 2"]


def test_a_turn_below_a_fact_taken_from_it_gives_its_place_to_the_next() -> None:
    """The fact ranked first names its turn: the turn goes."""
    found = [_item("fact", 7, 1), _item("interaction", 1, 1), _item("fact", 8, 2)]
    assert [i.id for i in one_per_turn(found, 2)] == [7, 8]


def test_a_fact_in_other_words_keeps_its_place_beside_its_turn() -> None:
    """A model's fact says its turn again in other words: it is what was kept, and stays."""
    found = [_item("interaction", 1, 1), _item("fact", 7, 1), _item("interaction", 2, 2)]
    found[1] = msgspec.structs.replace(found[1], text="The user said one thing.")
    assert [i.id for i in one_per_turn(found, 2)] == [1, 7]


def test_a_kept_sentence_from_the_middle_of_its_turn_gives_its_place() -> None:
    """The offline distiller keeps "speaker: sentence" from anywhere in a message: the turn
    ranked first holds it, so the fact goes however far into the message it was said."""
    turn = recalled(1, "Sam: Hi there!  I had gastritis\nlast week.\nassistant: Sorry.", AT)
    turn = msgspec.structs.replace(turn, type="interaction")
    fact = recalled(7, "Sam: I had gastritis last week.", AT, first=1)
    found = [turn, fact, _item("interaction", 2, 2)]
    assert [i.id for i in one_per_turn(found, 2)] == [1, 2]


def test_a_sentence_is_its_turns_own_words_only_as_its_own_speakers() -> None:
    """A line kept as another speaker's, or a speaker's words the turn does not hold, is not
    the turn's own: it keeps its place."""
    turn = "Sam: I had gastritis last week.\nassistant: Rest and drink water."
    assert said_in("Sam: I had gastritis last week.", turn)
    assert said_in("assistant: Rest and drink water.", turn)
    assert not said_in("Evan: I had gastritis last week.", turn)
    assert not said_in("Sam: I had the flu last week.", turn)


@pytest.mark.parametrize("turn_first", [True, False])
def test_a_long_turns_text_is_read_once_however_many_of_its_facts_are_listed(
    turn_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One turn of megabytes distilled offline gives hundreds of facts, all listed beside it by
    a search that finds its words: each item's text is collapsed once, not the turn's once a
    fact (199 facts and a 4 MB turn took 12 s, after the store's time budget)."""
    turn = recalled(1, "Sam: " + "garden silver market " * 20_000, AT, type="interaction")
    facts = [recalled(100 + n, f"Sam: fact number {n}", AT, first=1) for n in range(199)]
    found = [turn, *facts] if turn_first else [*facts, turn]
    collapsed = list[int]()

    def counted(text: str) -> str:
        collapsed.append(len(text))
        return plain(text)

    monkeypatch.setattr(distinct, "plain", counted)
    assert len(one_per_turn(found, 200)) == 200
    assert sum(collapsed) <= sum(len(i.text) for i in found)


def test_two_facts_of_one_turn_and_a_batchs_fact_all_stay() -> None:
    """Two sentences of one turn are two memories; a fact drawn from several turns and a
    summary are nobody's repeat."""
    found = [
        _item("interaction", 1, 1),
        _item("fact", 7, 2),
        _item("fact", 8, 2),
        _item("fact", 9, 1, 3),
        _item("summary", 3, 1, 1),
    ]
    assert _names(one_per_turn(found, 10)) == _names(found)


async def test_search_fills_its_places_with_distinct_turns(open_store: StoreOpener) -> None:
    """Three turns about greyhounds, a fact of the first's own words: a search for three
    results returns three memories of three turns, never the fact with its turn."""
    store = open_store()
    said = [
        "I adopted a greyhound called Biscuit last spring.",
        "The greyhound rescue asked me to foster another greyhound.",
        "My greyhound hates the rain.",
    ]
    await store.append([[new(text) for text in said]])
    fact = Fact("state", "I adopted a greyhound called Biscuit last spring.", sources=[1])
    await store.commit_batch(
        "distill", BatchOutcome([ScopeResult("b1", "s", None, "", [fact], 1, 1)], [], [], None)
    )
    try:
        found = await Recall(store, RecallConfig()).search(
            SearchQuery(q="greyhound Biscuit", scope="s", limit=3)
        )
        everything = await Recall(store, RecallConfig()).search(
            SearchQuery(q="greyhound Biscuit", scope="s", limit=3, types=("fact",))
        )
    finally:
        store.close()
    assert sorted(i.first_seq for i in found) == [1, 2, 3]
    assert [i.text for i in everything] == [fact.text]  # facts alone: nothing to leave out
