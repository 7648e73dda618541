"""A newer fact restating an older one's subject goes before it in a block."""

from __future__ import annotations

from forged.models import MemoryItem
from forged.recall.packing import pack
from forged.recall.updates import newest_first
from tests.support.data import recalled


def _fact(n: int, text: str, day: str, kind: str = "profile") -> MemoryItem:
    return recalled(n, text, f"2023-{day}T10:00:00Z", kind=kind, scope="user:ana")


OLD = _fact(1, "Ana: I usually do my morning run at 6:30 am.", "05-01")
NEW = _fact(2, "Ana: I moved my morning run to 7:15 am.", "06-01")
OTHER = _fact(3, "Ana: I adopted a greyhound named Pixel.", "05-15")


def test_the_newer_value_goes_before_the_older() -> None:
    """Ranked after the older, the newer restatement is moved just before it."""
    assert [i.id for i in newest_first([OTHER, OLD, NEW])] == [3, 2, 1]


def test_an_older_restatement_ranked_after_stays_there() -> None:
    """Already ahead, the newer one is not moved, nor is the unrelated fact."""
    assert [i.id for i in newest_first([NEW, OTHER, OLD])] == [2, 3, 1]


def test_a_chain_of_values_ends_newest_first() -> None:
    """Three values of one subject: the newest first, then the one before."""
    newest = _fact(4, "Ana: I moved my morning run to 8:10 am.", "07-01")
    assert [i.id for i in newest_first([OLD, NEW, newest])] == [4, 2, 1]


def test_a_fact_that_only_repeats_another_is_not_a_restatement() -> None:
    """A fact whose words are all in the other's says no new value: order kept."""
    same = _fact(5, "Ana: morning run at 6:30 am.", "07-01")
    assert [i.id for i in newest_first([OLD, same])] == [1, 5]


def test_the_block_holds_the_new_value_ahead_of_the_old() -> None:
    """Offered older first, the block still shows the new value before the old one."""
    block = pack(newest_first([OLD, NEW]), 200).text
    assert 0 < block.index("7:15") < block.index("6:30")


def test_two_facts_on_one_subject_with_no_change_keep_their_order() -> None:
    """Related facts, the newer saying nothing changed and holding no other number, are not
    an update: search's order stands."""
    lake = _fact(6, "Mel painted a lake sunrise with her kids.", "05-01")
    horse = _fact(7, "Mel painted a horse with her kids.", "06-01")
    assert [i.id for i in newest_first([lake, horse])] == [6, 7]
