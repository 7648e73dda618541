"""Sentences: where one ends and the next begins, in text with and without capitals, and CJK."""

from __future__ import annotations

from forged.text.sentences import sentences


def test_a_stop_before_a_capital_or_a_digit_ends_a_sentence() -> None:
    """The common case, a closing quote kept with its sentence."""
    assert sentences('Mel said: "I painted it!" It is lovely. 3 more to go.') == [
        'Mel said: "I painted it!"',
        "It is lovely.",
        "3 more to go.",
    ]


def test_text_written_without_capitals_is_cut_into_its_sentences() -> None:
    """A user who never writes a capital still says several things."""
    assert sentences("i moved to berlin. my sister stayed in lisbon! is she ok? yes.") == [
        "i moved to berlin.",
        "my sister stayed in lisbon!",
        "is she ok?",
        "yes.",
    ]


def test_an_abbreviation_or_an_ellipsis_before_a_small_letter_ends_nothing() -> None:
    """ "7 a.m. every day", "e.g. apples", "etc. and", "J. smith", "so... but" go on."""
    for said in (
        "We meet at 7 a.m. every day.",
        "Bring fruit, e.g. apples and pears.",
        "Pens, paper, etc. and a ruler.",
        "I met J. smith there.",
        "It was tech stuff... but the worst was the boss.",
        "Prices went up 3.5 percent.",
    ):
        assert sentences(said) == [said]


def test_chinese_and_japanese_stops_end_a_sentence_without_a_space() -> None:
    """The full stop and the full-width marks end a sentence; no space follows them in CJK."""
    said = "我搬到了柏林。我妹妹在里斯本当护士\uff01她好吗\uff1f"
    assert sentences(said) == ["我搬到了柏林。", "我妹妹在里斯本当护士\uff01", "她好吗\uff1f"]
    assert sentences("東京に引っ越しました。「猫も一緒です。」元気です。") == [
        "東京に引っ越しました。",
        "「猫も一緒です。」",
        "元気です。",
    ]


def test_capitals_of_other_scripts_start_a_sentence() -> None:
    """A capital is any script's: Cyrillic, Greek, accented Latin."""
    assert sentences("Это Москва. Привет. Όλα καλά. École demain.") == [
        "Это Москва.",
        "Привет.",
        "Όλα καλά.",
        "École demain.",
    ]
