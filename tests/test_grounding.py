"""The grounding check: what a transcript supports is kept, what it does not is dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.corpus import locomo_path
from bench.grounding import calibrate
from forged.grounding import Sources, check

DATE = "2023-05-08T13:56:00Z"  # a Monday
SOURCES = Sources.of(
    [
        (1, DATE, "Caroline: I went to a LGBTQ support group yesterday and it was so powerful."),
        (
            2,
            DATE,
            "Melanie: I painted that lake sunrise last year, in 2022.\nMelanie: I have 3 kids.",
        ),
    ]
)


@pytest.mark.parametrize(
    ("text", "sources"),
    [
        ("Caroline attended an LGBTQ support group on 7 May 2023.", [1]),
        ("Melanie painted a lake sunrise in 2022.", [2]),
        ("Melanie has three kids.", [2]),
    ],
)
def test_a_paraphrase_with_its_dates_is_kept_and_cites_its_interactions(
    text: str, sources: list[int]
) -> None:
    """Paraphrases, spelled-out numbers and dates resolved from the interaction's date pass."""
    verdict = check(text, SOURCES)
    assert verdict.grounded, verdict.reason
    assert verdict.sources == sources


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("34", "shorter than 12 characters"),
        ("It is 34 or 35, and 194.", "no words, only numbers or stopwords"),
        ("Caroline moved to Portland to study.", "names not in the sources: portla"),
        ("Melanie has 5 kids and a dog.", "numbers not in the sources: 5"),
        ("Melanie painted a lake sunrise in 1999.", "a year far from the sources' dates"),
        (
            "The team has developed a new tool to help people with mental wellbeing.",
            "0% of its content words in the sources",
        ),
        (  # the bundled model's: a true sentence, then an invented one
            "Caroline went to a support group on 7 May 2023. She was so proud of her team and"
            " the work they did",
            "a sentence with 0% of its content words in one line",
        ),
    ],
)
def test_invented_text_is_dropped_with_its_reason(text: str, reason: str) -> None:
    """Bare numbers, unknown names, numbers and years, and unsupported words fail, in the
    whole text or in one of its sentences."""
    assert check(text, SOURCES).reason == reason


def test_a_summary_may_draw_on_every_line() -> None:
    """A summary passes on the words of all sources, not one line's."""
    summary = "Caroline went to a support group; Melanie painted a lake sunrise and has kids."
    assert check(summary, SOURCES, summary=True).sources == [1, 2]


def test_the_check_keeps_locomo_gold_and_drops_invented_facts() -> None:
    """Calibration: >= 90 % of LoCoMo's gold observations kept, >= 90 % of invented ones dropped."""
    path = locomo_path(Path(__file__).resolve().parent.parent)
    if path is None:
        pytest.skip("LoCoMo (shared/datasets/locomo10.json) is not present")
    rates = calibrate(path)
    print(rates)
    assert rates["gold fact, its batch"][1] >= 0.90
    assert rates["gold summary"][1] >= 0.90
    assert rates["invented fact"][1] <= 0.10
    assert rates["invented summary"][1] <= 0.10
    assert rates["invented by a small model"][1] == 0.0


def test_a_year_like_number_ties_a_fact_to_the_line_that_says_it() -> None:
    """Lines that differ only in a number from 1900 on: each fact cites its own line, and a
    year the text shares with every interaction's date cites nothing more."""
    sources = Sources.of(
        [
            (seq, "2023-05-07T10:00:00Z", f"user: Turn push-{seq}: shall we keep PostgreSQL here?")
            for seq in (1899, 1900, 1901, 1902)
        ]
    )
    for seq in (1899, 1900, 1901, 1902):
        said = f"Recorded: user: Turn push-{seq}: shall we keep PostgreSQL here?"
        assert check(said, sources).sources == [seq]
    assert check("In 2023 the user kept PostgreSQL here.", sources).sources == [1899]


def test_a_fact_cites_the_turns_around_its_best_line_not_a_far_one() -> None:
    """A word the best line lacks (a name said in many turns) is found in the next turns, not
    in a turn of another day that happens to come first: the fact is dated by its own day."""
    sources = Sources.of(
        [
            (1, "2023-05-01T10:00:00Z", "Caroline: Melanie, how are the kids?"),
            (7, "2023-05-20T10:00:00Z", "Melanie: I painted a lake sunrise last year."),
            (8, "2023-05-20T10:01:00Z", "Caroline: That's lovely!"),
        ]
    )
    assert check("Melanie showed Caroline a lake sunrise she painted.", sources).sources == [7, 8]
