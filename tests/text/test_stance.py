"""Stance: negations written loosely, hedges, qualifiers, whose a clause is, and antonyms."""

from __future__ import annotations

import pytest

from forged.text.stance import fact_stance, flipped, negated, opposite_terms, stance


def _words(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize(
    "said",
    [
        "I dont eat pork",
        "she doesnt live there",
        "I hardly ever drink coffee",
        "I declined the offer",
        "I don't miss London",
        "I'm not too keen on sushi",
        "I don't believe in astrology",
        "I don't mind weekends",
    ],
)
def test_loose_negations_and_former_idioms_negate(said: str) -> None:
    """No apostrophe, a word of refusal or rarity, and "don't miss", "not too", "don't mind"."""
    assert negated(_words(said))


@pytest.mark.parametrize("said", ["I can't wait to go", "no doubt it works", "not only that"])
def test_idioms_that_say_something_positive_do_not_negate(said: str) -> None:
    assert not negated(_words(said))


def test_antonyms_turn_a_clause_round_only_against_their_pair() -> None:
    """ "hate" against "love" is turned round; "sat down" says nothing against a clause that
    never speaks of up or down."""
    hate, love = opposite_terms(["i", "hate", "mornings"]), opposite_terms(["loves", "mornings"])
    down = opposite_terms(["we", "sat", "down"])
    assert flipped(hate, love) and not flipped(love, hate)
    assert not flipped(down, frozenset())
    assert flipped(down, opposite_terms(["is", "up"]))


def test_a_question_or_condition_hedges_unless_put_to_the_listener() -> None:
    """ "Should we migrate?" and "if the budget allows" hedge; "have you met him?" does not."""
    assert stance(_words("should we migrate"), question=True).hedged
    assert stance(_words("we will hire two"), sentence=(True, False)).hedged
    assert not stance(_words("have you met him"), question=True).hedged
    assert stance(_words("maybe I will move")).hedged


def test_whose_a_clause_is() -> None:
    """ "My wife runs" is the wife's; "my wife and I run" is also mine."""
    assert stance(_words("my wife runs 10 km")).owner == "wife"
    assert stance(_words("my wife and I run")).owner is None


def test_a_fact_keeps_a_qualifier_by_a_word_or_a_past_tense() -> None:
    assert stance(_words("I worked there until 2020")).qualified
    assert stance(_words("I used to play")).qualified
    assert not stance(_words("I used Python")).qualified
    assert fact_stance(_words("The user worked at Google")).qualified
    assert not fact_stance(_words("The user works at Google")).qualified
