"""Agreement: whether a sentence says what its source line says, not its opposite or a
recombination of it: the same polarity (a negation on both sides or on neither), and each name
and number beside the same word (swapped people, numbers or choices do not agree).

Both checks compare word stems (forged.grounding's) in the order they are written: a line is
cut into clauses at punctuation, and a term's partner is the next word the sentence and the
line share (or, for the last one, the one before).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

# Words that turn a clause around; "no longer" and "stopped" hold "no" and a stop.
NEGATIONS = frozenset(
    (  # noqa: SIM905 - a paragraph of words reads better than a column of quotes
        "not no nor never neither none nobody nothing nowhere cannot stopped quit quits anymore "
        "without"
    ).split()
)
_NOT_SUFFIXES = ("n't", "n\u2019t")  # don't, isn't, can't, won't
_CLAUSE_END = re.compile(r"[,;.!?()\u2013\u2014]+|\s+but\s+|\s+-\s+")  # where a clause ends


def negated(tokens: Sequence[str]) -> bool:
    """Whether words (as written) hold a negation."""
    return any(t.casefold() in NEGATIONS or t.casefold().endswith(_NOT_SUFFIXES) for t in tokens)


def clauses(text: str) -> list[str]:
    """A line's clauses: cut at punctuation and at "but"."""
    return [c for c in _CLAUSE_END.split(text) if c.strip()]


def _partner(terms: list[str], at: int, shared: set[str]) -> tuple[str, int] | None:
    """The next term of `terms` after `at` that is in `shared` (direction +1), or else the one
    before it (direction -1); None when neither exists."""
    for i in range(at + 1, len(terms)):
        if terms[i] in shared:
            return terms[i], 1
    for i in range(at - 1, -1, -1):
        if terms[i] in shared:
            return terms[i], -1
    return None


def _partners_of(terms: list[str], term: str, shared: set[str], direction: int) -> set[str]:
    """The partners `term` has in a line: its next (or previous) shared term, per occurrence."""
    out = set()
    for at, t in enumerate(terms):
        if t != term:
            continue
        steps = range(at + 1, len(terms)) if direction > 0 else range(at - 1, -1, -1)
        out.add(next((terms[i] for i in steps if terms[i] in shared and terms[i] != term), ""))
    return out


def partnered(
    sentence: list[str], items: set[str], lines: Callable[[str], list[list[str]]]
) -> str | None:
    """The first of `items` (names, numbers) of a sentence's terms whose partner no source line
    gives it, or None. `lines(term)` are the term lists of the lines holding `term`."""
    for at, term in enumerate(sentence):
        if term not in items:
            continue
        found = False
        for line in lines(term):
            shared = set(line) & set(sentence)
            partner = _partner(sentence, at, shared - {term})
            if partner is None or partner[0] in _partners_of(line, term, shared, partner[1]):
                found = True
                break
        if not found:
            return term
    return None
