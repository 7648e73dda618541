"""Agreement: whether a sentence says what its source line says, not its opposite or a
recombination of it: the same polarity (a negation on both sides or on neither), and names and
numbers in their own places (swapped people, numbers or choices do not agree).

Both checks compare word stems (forged.text.grounding's) in the order they are written: a line is
cut into clauses at punctuation; two names or numbers are swapped when exchanging them puts
the words a sentence shares with a line in that line's order more nearly.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Sequence

__all__ = [
    "MAX_PLACES",
    "MAX_PLACINGS",
    "NEGATIONS",
    "clause_ends",
    "clauses",
    "negated",
    "partnered",
]

MAX_PLACES = 3  # occurrences of a term in a line tried as its place
MAX_PLACINGS = 256  # placements of a sentence's terms tried in one line
# Words that turn a clause around; "no longer" and "stopped" hold "no" and a stop.
NEGATIONS = frozenset(
    (  # noqa: SIM905 - a paragraph of words reads better than a column of quotes
        "not no nor never neither none nobody nothing nowhere cannot stopped quit quits anymore "
        "without"
    ).split()
)
_NOT_SUFFIXES = ("n't", "n\u2019t")  # don't, isn't, can't, won't
_CLAUSE_END = re.compile(r"[,;.!?()\u2013\u2014]+|\s+but\s+|\s+-\s+")  # where a clause ends
# Negations that say something positive: "can't wait", "no doubt", "not only", "never forget".
_IDIOMS = frozenset(
    {"wait", "doubt", "only", "matter", "forget", "worry", "stop", "miss", "so", "long", "too"}
    | {"bad", "hesitate", "mind", "help", "believe", "just", "everyone", "every"}
)


def negated(tokens: Sequence[str]) -> bool:
    """Whether words (as written) hold a negation, idioms such as "can't wait" apart."""
    folded = [t.casefold() for t in tokens]
    return any(
        (t in NEGATIONS or t.endswith(_NOT_SUFFIXES))
        and not (folded[i + 1 : i + 2] and folded[i + 1] in _IDIOMS)
        for i, t in enumerate(folded)
    )


def clause_ends(text: str) -> Iterator[re.Match[str]]:
    """Where the clauses of a text end."""
    return _CLAUSE_END.finditer(text)


def clauses(text: str) -> list[str]:
    """A text's clauses: cut at punctuation and at "but"."""
    return [c for c in _CLAUSE_END.split(text) if c.strip()]


def _discordance(order: list[str], at: dict[str, list[int]]) -> int:
    """How many pairs of `order` a line has the other way round, its terms placed where that
    is fewest (`at`: where each term occurs in the line, the first MAX_PLACES times)."""
    choices = itertools.islice(itertools.product(*(at[t] for t in order)), MAX_PLACINGS)
    return min(
        sum(a > b for i, a in enumerate(placed) for b in placed[i + 1 :]) for placed in choices
    )


def _swapped(sentence: list[str], items: set[str], line: list[str]) -> str | None:
    """An item the sentence puts where the line has another: exchanging two of the items the
    line holds puts the sentence's shared terms in the line's order more nearly. None if no
    exchange does."""
    at: dict[str, list[int]] = {}
    for i, term in enumerate(line):  # an item may be at any of its places; a word at its first
        places = at.setdefault(term, [])
        if len(places) < (MAX_PLACES if term in items else 1):
            places.append(i)
    order = list(dict.fromkeys(t for t in sentence if t in at))
    held = [t for t in order if t in items]
    base = _discordance(order, at)
    for i, a in enumerate(held):
        for b in held[i + 1 :]:
            swap = {a: b, b: a}
            if _discordance([swap.get(t, t) for t in order], at) < base:
                return a
    return None


def partnered(
    sentence: list[str], items: set[str], lines: Callable[[str], list[list[str]]]
) -> str | None:
    """A name or number (of `items`) the sentence gives another's place, or None: every line
    holding two of them says them the other way round (`lines(term)` are the term lists of
    the lines holding `term`). A paraphrase may reorder words; only an exchange is refused."""
    present = [t for t in dict.fromkeys(sentence) if t in items]
    if len(present) < 2:
        return None
    both = [line for line in lines(present[0]) if len(items.intersection(line)) >= 2]
    both += [
        line
        for t in present[1:]
        for line in lines(t)
        if present[0] not in line and len(items.intersection(line)) >= 2
    ]
    swaps = [_swapped(sentence, items, line) for line in both]
    return swaps[0] if swaps and all(swaps) else None
