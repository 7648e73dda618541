"""The grounding check: what a transcript supports is kept, what it does not is dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.corpus import locomo_path
from bench.distortions import (
    DISTORTIONS,
    DISTORTIONS_REFUSED,
    FAITHFUL,
    FAITHFUL_KEPT,
    OUT_OF_REACH,
)
from bench.grounding import INVERSIONS, SWAPS, calibrate, distortion_table, probe_sources
from forged.distill.batches import ground
from forged.models import DistilledMemory, LinePick, Message, StoredInteraction
from forged.text.grounding import Sources, check

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
    path = locomo_path(Path(__file__).resolve().parents[2])
    if path is None:
        pytest.skip("LoCoMo (shared/datasets/locomo10.json) is not present")
    rates = calibrate(path)
    print(rates)
    assert rates["gold fact, its batch"][1] >= 0.90
    assert rates["gold summary"][1] >= 0.90
    assert rates["invented fact"][1] <= 0.10
    assert rates["invented summary"][1] <= 0.10
    assert rates["invented by a small model"][1] == 0.0
    for probe in ("inverted fact (probe)", "swapped fact (probe)", "misattributed fact (probe)"):
        assert rates[probe][1] == 0.0
    assert rates["probe said again"][1] == 1.0


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
    asked = "In 2023 the user asked whether to keep PostgreSQL here."  # a question, kept as one
    assert check(asked, sources).sources == [1899]


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


@pytest.mark.parametrize(("said", "fact"), INVERSIONS)
def test_a_fact_that_inverts_what_was_said_is_dropped(said: str, fact: str) -> None:
    """A negation on one side only ("not", "never", "no longer", "stopped", "doesn't")."""
    sources = Sources.of([(1, DATE, said)], users={"user"})
    assert (
        check(fact, sources).reason
        == "says the opposite of its source (a negation or an antonym on one side only)"
    )


@pytest.mark.parametrize(("said", "fact"), INVERSIONS)
def test_the_same_polarity_is_kept(said: str, fact: str) -> None:
    """What was said, restated, keeps its negation and passes."""
    sources = Sources.of([(1, DATE, said)], users={"user"})
    assert check(said.removeprefix("user: "), sources).grounded


@pytest.mark.parametrize(("said", "fact"), SWAPS)
def test_swapped_people_numbers_and_choices_are_dropped(said: str, fact: str) -> None:
    """Each name and number must sit beside the word it sits beside in its line."""
    sources = Sources.of([(1, DATE, said)], users={"user", "Bob"})
    reason = check(fact, sources).reason
    assert reason is not None and reason.startswith("puts ")


@pytest.mark.parametrize(
    "fact",
    [
        "Alice's brother lives in Porto.",
        "The user needs 3 servers for staging.",
        "The user uses PostgreSQL for the orders and MySQL for the analytics.",
    ],
)
def test_names_and_numbers_beside_their_partners_pass(fact: str) -> None:
    """The unswapped restatements of the same lines are kept."""
    sources = Sources.of([(1, DATE, "\n".join(said for said, _ in SWAPS))], users={"user", "Bob"})
    assert check(fact, sources).grounded


def test_a_fact_about_a_speaker_needs_that_speakers_lines() -> None:
    """Bob typing "Caroline: correction, I moved to Paris" supports nothing about Caroline."""
    said = "Caroline: I live in Lisbon with my cat.\nBob: Caroline: correction, I moved to Paris."
    sources = Sources.of([(1, DATE, said)], users=set())
    assert check("Caroline moved to Paris.", sources).reason == (
        "names not in what Caroline said: pari"
    )
    assert check("Caroline lives in Lisbon with her cat.", sources).grounded
    alone = Sources.of([(1, DATE, "Bob: Caroline: correction, I moved to Paris.")], users=set())
    assert check("Caroline moved to Paris.", alone).reason == "names not in the sources: caroli"


def test_the_user_is_the_user_lines_speaker() -> None:
    """A fact saying "the user" or "I" is supported only by what the user said."""
    said = "user: Which editor do you use?\nassistant: I prefer vim for quick edits."
    sources = Sources.of([(1, DATE, said)], users={"user"})
    assert not check("The user prefers vim for quick edits.", sources).grounded
    assert check("The assistant prefers vim for quick edits.", sources).grounded


@pytest.mark.parametrize(
    ("said", "fact"),
    [
        (
            "user: Which database?\nassistant: PostgreSQL: you need JSONB and transactions.",
            "assistant: PostgreSQL: you need JSONB and transactions.",
        ),
        (
            "alice: Let's use PostgreSQL.\nassistant: Agreed: PostgreSQL for the new service.",
            "Agreed: PostgreSQL for the new service.",
        ),
        (
            "user: Subject: Invitation to the launch party on Friday",
            "user: Subject: Invitation to the launch party on Friday.",
        ),
        (
            "assistant: ### Reasons for Not Feeling Anxious About the Move",
            "### Reasons for Not Feeling Anxious About the Move",
        ),
    ],
)
def test_a_line_copied_word_for_word_is_grounded(said: str, fact: str) -> None:
    """A transcript line as written, with or without its speaker, is grounded by definition:
    a `Word:` inside it is no speaker to drop, a heading no claim to contradict."""
    verdict = check(fact, Sources.of([(7, DATE, said)], users={"user", "alice"}))
    assert (verdict.grounded, verdict.sources) == (True, [7]), verdict.reason


def test_a_copy_that_looks_like_another_speakers_line_is_not_verbatim() -> None:
    """Bob typing "Caroline: I moved to Paris." is copied with Bob's label, or not at all."""
    sources = Sources.of(
        [(1, DATE, "Caroline: Hi.\nBob: Caroline: I moved to Paris.")], users=set()
    )
    assert check("Bob: Caroline: I moved to Paris.", sources).grounded
    assert not check("Caroline: I moved to Paris.", sources).grounded


@pytest.mark.parametrize(
    ("family", "said", "fact"),
    [(family, *probe) for family, probes in DISTORTIONS.items() for probe in probes],
)
def test_a_distortion_probe_is_refused(family: str, said: str, fact: str) -> None:
    """Each probe of bench.distortions, but those documented as out of reach."""
    if (said, fact) in OUT_OF_REACH:
        pytest.skip("out of a lexical check's reach (docs/grounding.md)")
    verdict = check(fact, probe_sources(said))
    assert not verdict.grounded, f"{family}: kept {fact!r}"


@pytest.mark.parametrize(("said", "fact"), FAITHFUL)
def test_a_faithful_paraphrase_is_kept(said: str, fact: str) -> None:
    """Each faithful paraphrase of bench.distortions, but those documented as out of reach."""
    if (said, fact) in OUT_OF_REACH:
        pytest.skip("out of a lexical check's reach (docs/grounding.md)")
    verdict = check(fact, probe_sources(said))
    assert verdict.grounded, verdict.reason


def test_the_distortion_goals_are_met() -> None:
    """At least 90 % of the distortions refused, at least 95 % of the paraphrases kept."""
    rows = distortion_table()
    probes = sum(n for _, n, _ in rows[:-1])
    refused = sum(c for _, _, c in rows[:-1])
    _, paraphrases, kept = rows[-1]
    assert probes >= 40 and paraphrases >= 20
    assert refused / probes >= DISTORTIONS_REFUSED
    assert kept / paraphrases >= FAITHFUL_KEPT


def test_picked_lines_that_start_with_a_word_and_a_colon_are_kept() -> None:
    """An extractive distiller's picks, stored verbatim with their speaker, all survive
    grounding: the README's import sample, its quick start's answer, a mail's subject and a
    markdown heading that holds "Not"."""
    said = [
        Message("user", "Which database for the new service?"),
        Message("assistant", "PostgreSQL: you need JSONB and transactions."),
        Message("assistant", "Agreed: PostgreSQL for the new service."),
        Message(
            "user", "Subject: Invitation to the launch party\n### Reasons for Not Feeling Anxious"
        ),
    ]
    item = StoredInteraction(4, "s", None, DATE, 40, said)
    picks = [LinePick(4, line, "event") for line in range(1, 6)]
    grounded = ground(DistilledMemory("", [], picks=picks), [item])
    assert (grounded.dropped, grounded.unknown_picks) == ([], 0)
    assert [f.text for f in grounded.facts] == [
        "user: Which database for the new service?",
        "assistant: PostgreSQL: you need JSONB and transactions.",
        "assistant: Agreed: PostgreSQL for the new service.",
        "user: Subject: Invitation to the launch party",
        "user: ### Reasons for Not Feeling Anxious",
    ]
