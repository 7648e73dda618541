"""Stance: what a clause says besides its words, which a distorting model drops or turns round.

A negation (also written without its apostrophe, "dont", or as a word of refusal or rarity,
"declined", "rarely"); a hedge, condition or question ("maybe", "if", "...?"); a qualifier that
puts it in the past ("until", "former", "used to"); whose it is ("my wife runs", with no "I":
the wife's, not the speaker's); and the antonyms it holds ("hate" is the other side of "love",
"down" of "up"). forged.text.grounding compares a fact's clauses with its source's by these.

Everything here reads a clause's tokens once, linear in them; comparing two stances costs what
the sentence's antonyms do (a handful), never what the line's length does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

__all__ = [
    "ADDRESSING",
    "CONDITIONS",
    "ENTITY_QUALIFIERS",
    "HEDGES",
    "NEGATIONS",
    "QUALIFIERS",
    "Stance",
    "conditional",
    "flipped",
    "negated",
    "opposite_terms",
    "stance",
]


def _words(paragraph: str) -> frozenset[str]:
    """A set of words written as a paragraph (reads better than a column of quotes)."""
    return frozenset(paragraph.split())


# Words that turn a clause around; "no longer" and "stopped" hold "no" and a stop. Also the
# contractions a hurried writer types without their apostrophe, and words that refuse or
# nearly negate ("hardly ever", "declined the offer", "failed to pass").
NEGATIONS = _words(
    "not no nor never neither none nobody nothing nowhere cannot stopped quit quits anymore "
    "without dont doesnt didnt cant wont isnt arent wasnt werent havent hasnt hadnt "
    "shouldnt wouldnt couldnt mustnt neednt aint hardly barely rarely seldom scarcely "
    "declined declines refused refuses failed fails"
)
_NOT_SUFFIXES = ("n't", "n\u2019t")  # don't, isn't, can't, won't
# Negations that say something positive: "can't wait", "no doubt", "not only", "never forget".
# Not "don't miss", "not too keen", "don't believe", "don't mind": those negate.
_IDIOMS = frozenset(
    {"wait", "doubt", "only", "matter", "forget", "worry", "stop", "long", "bad", "hesitate"}
    | {"help"}
)
# Words that make a clause uncertain: what follows them was not said to be so.
HEDGES = _words("maybe perhaps might possibly probably thinking considering wondering unsure")
CONDITIONS = _words("if unless whether")  # these hedge their whole sentence
# Words by which a fact keeps its source's uncertainty (or makes its own): it is not certain.
_HEDGED_FACT = (
    HEDGES
    | CONDITIONS
    | _words(
        "may could would plan plans planned planning want wants wanted hope hopes hoping "
        "consider considers considered think thinks idea ideas likely intends willing keen "
        "eager curious interested open excited looking"
    )
    # Reporting what was said keeps it: asking, advice, an offer, a suggestion, a wish.
    | _words(
        "ask asks asked asking seek seeks seeking sought inquired wonder wonders wondered "
        "advice advise advises advised recommend recommends recommended suggest suggests "
        "suggested suggestion encourage encourages encouraged offer offers offered express "
        "expresses expressed mention mentions mentioned say says said tell tells told share "
        "shares shared discuss discusses discussed talk talks talked remind reminds reminded "
        "assure assures assured assuring invite invites invited request requests requested"
    )
)
# Words that put a clause in the past or end it: "until 2020", "my former boss", "used to".
QUALIFIERS = _words("until till former formerly previously ex once")
# Those that qualify a person or thing, who may be named again across a comma ("my former
# boss, Dana, lives in Oslo"): they qualify their whole sentence.
ENTITY_QUALIFIERS = _words("former formerly ex")
# Words by which a fact keeps it in the past; a verb in the past tense ("worked") does too.
_QUALIFIED_FACT = QUALIFIERS | _words(
    "used was were had past earlier before ago previous then since longer anymore"
)
# Words by which one speaker addresses another or advises: a suggestion to the user is not
# what the user said or decided.
ADDRESSING = _words(
    "you your you're youre yours you'll you've you'd yourself let's lets try should suggest "
    "recommend consider could please"
)
_YOU = _words("you your you're youre yours you'll you've you'd yourself ya u")  # the listener
_SELF = _words("i i'm i've i'd i'll im ive me we we're we've us our")  # the speaker
_OWNERS = frozenset({"my"})  # "my wife runs": the clause is the wife's, not mine
# Antonyms: the first word's forms on one side, the second's on the other. A clause holding
# the other side's word reads as the first's, turned round ("hate" as "not love").
_PAIRS = (
    ("love loves loved loving", "hate hates hated hating"),
    ("like likes liked liking", "dislike dislikes disliked disliking"),
    ("fast faster fastest quick quicker", "slow slower slowest"),
    ("up", "down"),
    ("win wins won winning", "lose loses lost losing"),
    ("early earlier earliest", "late later latest"),
    ("cheap cheaper cheapest", "expensive"),
    ("hot hotter hottest warm warmer", "cold colder coldest cool cooler"),
    ("increase increases increased increasing", "decrease decreases decreased decreasing"),
    ("accept accepts accepted accepting", "reject rejects rejected rejecting"),
    ("agree agrees agreed agreeing", "disagree disagrees disagreed disagreeing"),
    ("easy easier easiest", "hard harder hardest difficult"),
    ("happy happier happiest", "sad sadder saddest unhappy"),
    ("pass passes passed passing", "fail"),
    ("include includes included including", "exclude excludes excluded excluding"),
    ("allow allows allowed allowing", "forbid forbids forbade forbidden ban bans banned"),
    ("more", "less fewer"),
    ("best", "worst"),
    ("success successful succeeded", "failure unsuccessful"),
    ("true", "false"),
    ("open opened", "closed shut"),
)
# word -> (the pair's first word, whether the word is on the other side)
_ANTONYMS = {
    word: (first.split()[0], side)
    for first, second in _PAIRS
    for side, forms in ((False, first), (True, second))
    for word in forms.split()
}


class Stance(NamedTuple):
    """How a clause says what it says: negated, hedged, qualified, whose (the word after "my"
    when it has no "I"), and its antonyms as (the pair's first word, on the other side)."""

    negated: bool
    hedged: bool = False
    qualified: bool = False
    owner: str | None = None
    antonyms: frozenset[tuple[str, bool]] = frozenset()


def negated(tokens: Sequence[str]) -> bool:
    """Whether words (as written) hold a negation, idioms such as "can't wait" apart."""
    folded = [t.casefold() for t in tokens]
    return any(
        (t in NEGATIONS or t.endswith(_NOT_SUFFIXES))
        and not (folded[i + 1 : i + 2] and folded[i + 1] in _IDIOMS)
        for i, t in enumerate(folded)
    )


def conditional(tokens: Iterable[str]) -> tuple[bool, bool]:
    """Whether a sentence's words make all of it a condition ("if", "unless"), and whether
    they qualify all of it ("former", "ex")."""
    folded = {t.casefold() for t in tokens}
    return bool(folded & CONDITIONS), bool(folded & ENTITY_QUALIFIERS)


def _qualified(folded: list[str]) -> bool:
    return any(
        t in QUALIFIERS or (t == "used" and folded[i + 1 : i + 2] == ["to"])
        for i, t in enumerate(folded)
    )


def _owner(folded: list[str], stop: frozenset[str]) -> str | None:
    """The word after "my" in a clause that does not also speak of its speaker ("I", "we")."""
    if any(t in _SELF for t in folded):
        return None
    for i, t in enumerate(folded[:-1]):
        if t in _OWNERS and folded[i + 1] not in stop:
            return folded[i + 1]
    return None


def stance(
    tokens: Sequence[str],
    *,
    question: bool = False,
    sentence: tuple[bool, bool] = (False, False),
    stop: frozenset[str] = frozenset(),
) -> Stance:
    """A source clause's stance from its tokens as written; `question` when it ends in "?",
    `sentence`: whether its sentence is conditional, and qualified (`conditional`); `stop`:
    words no owner is. A question or condition put to the listener ("have you met him?", "if
    you ever need me") hedges nothing its speaker says of themselves."""
    folded = [t.casefold() for t in tokens]
    condition, qualified = sentence
    asks = (question or condition) and not any(t in _YOU for t in folded)  # not of the listener
    return Stance(
        negated(tokens),
        asks or any(t in HEDGES for t in folded),
        qualified or _qualified(folded),
        _owner(folded, stop),
        opposite_terms(folded),
    )


def fact_stance(tokens: Sequence[str], question: bool = False) -> Stance:
    """A fact clause's stance: hedged or qualified when it keeps any such word (more words
    count than in a source: a fact may say "plans to" for "maybe"), or a verb in the past."""
    folded = [t.casefold() for t in tokens]
    return Stance(
        negated(tokens),
        question or any(t in _HEDGED_FACT for t in folded),
        any(t in _QUALIFIED_FACT or (len(t) > 4 and t.endswith("ed")) for t in folded),
        None,
        opposite_terms(folded),
    )


def opposite_terms(folded: Iterable[str]) -> frozenset[tuple[str, bool]]:
    """The antonyms among (casefolded) words: each as its pair's first word, and whether it
    is the other side."""
    return frozenset(_ANTONYMS[t] for t in folded if t in _ANTONYMS)


def flipped(own: frozenset[tuple[str, bool]], other: frozenset[tuple[str, bool]]) -> bool:
    """Whether the antonyms of one side turn it round against the other's: an odd number of
    the pairs both hold are on the other side here (only pairs both hold count: "sat down"
    says nothing against a fact that never speaks of up or down)."""
    shared = {word for word, _ in own} & {word for word, _ in other}
    return sum(side for word, side in own if word in shared) % 2 == 1
