"""The agent-traffic measures' baselines: what a naive RAG's block over whole turns holds."""

from __future__ import annotations

from bench.agenteval import cut_to_fit
from bench.quality import raw_item
from forged.models import MemoryItem
from forged.recall.packing import cost
from forged.text.tokens import estimate_tokens

BUDGET = 400
AT = "2023-05-08T13:56:00.000Z"


def _turn(n: int, words: int) -> MemoryItem:
    """A whole turn of `words` words, each naming the turn."""
    return raw_item(n, "s", AT, "Ana", " ".join(f"t{n}w{w}" for w in range(words)))


def test_a_turn_too_long_for_the_block_is_cut_to_the_room_left() -> None:
    """The first turn that does not fit is cut to its head, in whole words; no later turn
    enters a full block, and the block stays within its budget."""
    block = cut_to_fit([_turn(0, 40), _turn(1, 2000), _turn(2, 5)], BUDGET)
    assert estimate_tokens(block) <= BUDGET
    assert "t0w39" in block and "t1w0 t1w1" in block
    assert "t1w1999" not in block and "t2w0" not in block
    assert BUDGET - estimate_tokens(block) < 10  # full but for part of a word


def test_turns_that_fit_are_taken_whole() -> None:
    """Turns that fit together are taken whole and in their order."""
    block = cut_to_fit([_turn(0, 10), _turn(1, 10)], BUDGET)
    assert "t0w9" in block and "t1w9" in block
    assert block.index("t0w0") < block.index("t1w0")


def test_a_block_with_no_room_for_a_word_holds_what_fit() -> None:
    """Cut to nothing, a turn is left out: the block holds the turns before it."""
    room = cost([_turn(0, 10)]) + 3  # less than another line with one word costs
    block = cut_to_fit([_turn(0, 10), _turn(1, 2000)], room)
    assert "t0w9" in block and "t1w" not in block
