"""Agreement: whether a sentence says what its source line says, not its opposite or a
recombination of it: the same polarity (a negation on both sides or on neither), and names and
numbers in their own places (swapped people, numbers or choices do not agree).

Polarity itself (what negates, what is an antonym) is forged.text.stance's. Both checks compare word stems (forged.text.grounding's) in the order they are written: a line is
cut into clauses at punctuation; two names or numbers are swapped when the sentence says one
before the other and the line, everywhere it holds them, says them the other way round (with
each term at one place, exactly when exchanging the two puts the sentence's terms in the line's
order more nearly: an exchange changes the count of pairs out of order by one plus twice the
terms between, in the direction of the pair itself).

Every check here is linear in the sentence and in the lines it reads, whatever their length or
script (an input that grew faster would let one long line stall distillation). A new check keeps
that: it reads the sentence once, reads a line only through what was computed from it once
(`places`, built when the line is first asked, linear in it) or through the index of the lines
holding a term (at most a fixed number of lines per term), and never compares every pair of
terms: a walk in one direction keeping a running minimum or maximum (as `_swapped` does) finds
a pair out of order in linear time.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

__all__ = [
    "Places",
    "clause_ends",
    "clauses",
    "partnered",
    "places",
]

# Where a clause ends: punctuation, "but", a dash, and "and" before a new subject ("my
# brother lives in Porto and I live in Lisbon" is two clauses, two people). A run of spaces is
# tried from its start only (linear, not quadratic).
_CLAUSE_END = re.compile(
    r"[,;.!?()\u2013\u2014]+|(?<!\s)\s+(?:but|-)\s+"
    r"|(?<!\s)\s+and\s+(?=(?:I|my|My|we|We|he|He|she|She|they|They|you|You)\b)"
)

Places = Mapping[str, tuple[int, int]]  # a line's terms: where each is first and last


def clause_ends(text: str) -> Iterator[re.Match[str]]:
    """Where the clauses of a text end."""
    return _CLAUSE_END.finditer(text)


def clauses(text: str) -> list[str]:
    """A text's clauses: cut at punctuation, at "but", and at "and" before a new subject."""
    return [c for c in _CLAUSE_END.split(text) if c.strip()]


def places(order: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Where each term of a line (its terms in order) is first and last: built once a line."""
    out: dict[str, tuple[int, int]] = {}
    for i, term in enumerate(order):
        out[term] = (out[term][0] if term in out else i, i)
    return out


def _swapped(held: list[str], at: Places) -> str | None:
    """The first of `held` (items in the sentence's order) that the line says, everywhere,
    after a later one: one walk from the end keeping the earliest last place seen."""
    earliest = sys.maxsize  # after every place
    found = None
    for term in reversed(held):
        first, last = at[term]
        if first > earliest:
            found = term
        earliest = min(earliest, last)
    return found


def partnered(
    sentence: Sequence[str],
    items: set[str],
    lines: Callable[[str], Iterable[tuple[int, Places]]],
) -> str | None:
    """A name or number (of `items`) the sentence gives another's place, or None: every line
    holding two of them says them the other way round (`lines(term)`: the lines holding
    `term`, each as an id and its places, at most a fixed number of them). A paraphrase may
    reorder words; only an exchange is refused. Linear: each item reads its own lines once."""
    present = [t for t in dict.fromkeys(sentence) if t in items]
    if len(present) < 2:
        return None
    held: dict[int, tuple[Places, list[str]]] = {}  # a line's items, in the sentence's order
    for term in present:
        for key, at in lines(term):
            if term in at:  # not only in what the line's index holds (its speaker's label)
                held.setdefault(key, (at, []))[1].append(term)
    swaps = [_swapped(terms, at) for at, terms in held.values() if len(terms) >= 2]
    return swaps[0] if swaps and all(swaps) else None
