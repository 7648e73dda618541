"""Neighbour expansion: the next turn of a session after each of the best turns found that asks
a question, on both stores; another session's turn, a filtered-out turn, the turn after one
that asks nothing and one past the best few are not."""

from __future__ import annotations

import msgspec

from forged.config import RecallConfig
from forged.models import Message
from forged.recall.engine import Recall
from forged.recall.neighbours import NEIGHBOUR_HITS
from forged.recall.query import SearchQuery
from forged.store.records import NewInteraction
from tests.conftest import StoreOpener

QUESTION = "What's the toughest part of restoring the old violin?"
ANSWER = "Paying extra attention to detail, every single day."  # not one word of the question
FILLER = "We went to the lake and the weather was lovely all afternoon."


def turn(text: str, session: str | None, at: str = "2026-11-29T17:00:00.000Z") -> NewInteraction:
    messages = msgspec.json.encode([Message(role="user", name="ann", text=text)])
    return NewInteraction(None, "s", session, at, at, 3, messages, None)


async def _turns(open_store: StoreOpener, q: str, **filters: str) -> list[str]:
    store = open_store()
    try:
        query = SearchQuery(q=q, scope="s", limit=10, types=("interaction",), **filters)
        return [i.text for i in await Recall(store, RecallConfig()).search(query)]
    finally:
        store.close()


async def test_the_answer_to_a_turn_found_follows_it(open_store: StoreOpener) -> None:
    """The turn after a hit in its session comes right after it, though it shares no word
    with the query; a turn of another session after it does not."""
    store = open_store()
    first = [turn(QUESTION, "one"), turn(ANSWER, "one"), turn(FILLER, "one")]
    await store.append([first, [turn("The violin needs new strings.", "two")]])
    await store.append([[turn(ANSWER + " Truly.", "three")]])
    store.close()
    found = await _turns(open_store, "violin restoring toughest")
    assert found == [f"ann: {QUESTION}", f"ann: {ANSWER}", "ann: The violin needs new strings."]


async def test_a_neighbour_outside_the_filters_is_left_out(open_store: StoreOpener) -> None:
    """A next turn said after `until` stays out, as any turn of that time would."""
    store = open_store()
    later = "2026-12-01T09:00:00.000Z"
    await store.append([[turn(QUESTION, "one"), turn(ANSWER, "one", at=later)]])
    store.close()
    found = await _turns(open_store, "violin", until="2026-11-30T00:00:00Z")
    assert found == [f"ann: {QUESTION}"]


async def test_only_the_best_turns_bring_their_neighbours(open_store: StoreOpener) -> None:
    """Past the first NEIGHBOUR_HITS, a hit's next turn is not added; without a session, none."""
    store = open_store()
    hits = [f"violin lesson number {n}, violin violin?" for n in range(NEIGHBOUR_HITS + 1)]
    pairs = [[turn(h, f"s{n}"), turn(f"Answer {n}.", f"s{n}")] for n, h in enumerate(hits)]
    await store.append([*pairs, [turn("A violin.", None), turn("No session.", None)]])
    store.close()
    found = await _turns(open_store, "violin lesson number")
    answers = [t for t in found if t.startswith("ann: Answer")]
    assert len(answers) == NEIGHBOUR_HITS
    assert "ann: No session." not in found


async def test_a_turn_that_asks_nothing_brings_no_neighbour(open_store: StoreOpener) -> None:
    """The turn after a statement is seldom its answer: it is not added; after a question in
    full-width CJK punctuation it is."""
    store = open_store()
    said = [turn("I restored the old violin.", "one"), turn(ANSWER, "one")]
    asked = [turn("小提琴修好了吗？", "two"), turn("还没有。", "two")]  # noqa: RUF001 (full width)
    await store.append([said, asked])
    store.close()
    assert await _turns(open_store, "violin") == ["ann: I restored the old violin."]
    assert await _turns(open_store, "小提琴") == ["ann: 小提琴修好了吗？", "ann: 还没有。"]  # noqa: RUF001
