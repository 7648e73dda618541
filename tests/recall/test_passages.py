"""Passages: a turn too long for a block is offered as the sentences the question is about."""

from __future__ import annotations

import msgspec

from forged.config import RecallConfig
from forged.models import MemoryItem, Message, speaker_lines
from forged.recall.engine import Recall
from forged.recall.fulltext import SHOWN_MESSAGE_CHARS, SHOWN_TURN_CHARS
from forged.recall.passages import CUT, PASSAGE_TOKENS, focus, passage
from forged.recall.query import SearchQuery
from forged.recall.updates import newest_first
from forged.store.records import NewInteraction
from forged.text.tokens import estimate_tokens
from tests.conftest import StoreOpener
from tests.support.data import new, recalled

AT = "2023-05-08T13:56:00Z"
ADVICE = "\n".join(["## Step one", "- Plan the visit and the budget for the hospital."] * 40)
FILLER = "We also painted the fence and cleaned the garage before the storm came in. "
USER = (
    FILLER * 6
    + "I visited a veteran's hospital and met some amazing people. "
    + "It made me appreciate what we have and the need to give back. "
    + FILLER * 6
)


def _turn(user: str, assistant: str = ADVICE, n: int = 1, at: str = AT) -> MemoryItem:
    said = [Message(role="user", name="John", text=user)]
    said += [Message(role="assistant", text=assistant)] if assistant else []
    speaker = "John, assistant" if assistant else "John"
    return recalled(n, speaker_lines(said), at, type="interaction", speaker=speaker)


def test_a_long_turn_is_offered_as_the_sentences_around_the_one_asked_about() -> None:
    """The user's sentence holding the question's words comes with the one after it, within
    the passage's size, marked where the turn was cut; the assistant's advice is left out."""
    found = passage(_turn(USER), "What did John think of the veteran's hospital?")
    assert found.text.startswith(f"John: {CUT} ")
    assert "I visited a veteran's hospital" in found.text
    assert "It made me appreciate what we have" in found.text
    assert found.text.endswith(CUT)
    assert "Step one" not in found.text and "budget" not in found.text
    assert estimate_tokens(found.text) <= PASSAGE_TOKENS + 10  # the speaker and the marks


def test_a_turn_that_fits_and_a_fact_stay_whole() -> None:
    """Only a turn longer than a passage is cut; a short turn and a fact are left as they are."""
    short = _turn("I visited a veteran's hospital. " * 20, assistant="")  # under half a block
    assert passage(short, "hospital") == short
    fact = msgspec.structs.replace(_turn(USER), type="fact", kind="state", text=USER * 3)
    assert passage(fact, "hospital") == fact


def test_one_long_sentence_is_cut_at_a_word() -> None:
    """A sentence longer than a passage gives its head, cut between words."""
    long = "I visited the hospital " + "and the garden " * 200 + "yesterday."
    found = passage(_turn(long), "hospital")
    assert found.text.startswith("John: I visited the hospital and the garden")
    assert found.text.endswith(f"garden {CUT}")


def test_a_newer_turn_restating_a_value_goes_before_the_older() -> None:
    """Two long turns about the morning run, compared by the passage the question is about:
    the newer, ranked second, goes first. As short lines of chat they keep search's order."""
    filler = "We talked about the weather and the garden for a while. " * 40
    old = _turn(filler + "I usually do my morning run at 6:30 am.", n=1)
    new_ = _turn(filler + "I moved my morning run to 7:15 am.", n=2, at="2023-06-08T13:56:00Z")
    question = "What time is the morning run?"
    assert focus(new_, question) == "I moved my morning run to 7:15 am."
    passages = [passage(i, question) for i in (old, new_)]
    assert [i.id for i in newest_first(passages, question)] == [2, 1]
    short = [msgspec.structs.replace(i, text=focus(i, question)) for i in (old, new_)]
    assert [i.id for i in newest_first(short, question)] == [1, 2]


async def test_a_block_holds_the_passage_of_a_turn_too_long_for_it(
    open_store: StoreOpener,
) -> None:
    """A user's message and a long markdown answer: the block holds the sentences asked
    about, not the whole turn, which would not fit."""
    store = open_store()
    said = [Message(role="user", name="John", text=USER), Message(role="assistant", text=ADVICE)]
    turn = msgspec.structs.replace(new("placeholder"), messages=msgspec.json.encode(said))
    await store.append([[turn]])
    try:
        block = await Recall(store, RecallConfig()).context(
            SearchQuery(q="veteran's hospital", scope="s", limit=10), 400
        )
    finally:
        store.close()
    assert "It made me appreciate what we have" in block.text
    assert "Step one" not in block.text


async def test_a_recalled_turn_holds_a_bounded_text(open_store: StoreOpener) -> None:
    """A turn of megabytes is recalled cut at a word, each message to SHOWN_MESSAGE_CHARS and
    the turn to SHOWN_TURN_CHARS, marked (twenty turns of 14 MB took a search 18 s and made a
    270 MB answer); every speaker's opening is kept, and the log keeps the turn whole."""
    store = open_store()
    said = "needle " + "hay " * 250_000
    messages = [
        Message(role="user", text=said),
        Message(role="assistant", text="Short answer."),
        *[Message(role="tool", text=said) for _ in range(6)],
    ]
    stamp = "2026-11-29T17:00:00.000Z"
    encoded = msgspec.json.encode(messages)
    await store.append([[NewInteraction(None, "s", None, stamp, stamp, 3, encoded, None)]])
    try:
        recall = Recall(store, RecallConfig())
        query = SearchQuery(q="needle", scope="s", limit=10, types=("interaction",))
        (item,) = await recall.search(query)
        block = await recall.context(query, 400)
        (whole,) = await store.read_log(0, 1)
    finally:
        store.close()
    lines = item.text.split("\n")
    assert lines[0].startswith("user: needle hay") and lines[0].endswith(f"hay {CUT}")
    assert len(lines[0]) <= len("user: ") + SHOWN_MESSAGE_CHARS
    assert lines[1] == "assistant: Short answer."
    kept = [line.split(": ", 1)[1].removesuffix(f" {CUT}") for line in lines]
    assert sum(map(len, kept)) <= SHOWN_TURN_CHARS and len(lines) == 5
    assert "needle" in block.text
    assert [m.text for m in whole.messages] == [m.text for m in messages]
