"""Updates: in a block, a newer fact or long turn that restates an older one's subject goes before it.

"I moved my morning run to 7:15 am" and, said a month before, "I usually do my morning run at
6:30 am" share most of their words; full-text search may rank the older first (it is shorter,
or says "morning run" twice). Whether or not consolidation has retired it, the block offers the
newer first: the older, if it then adds too few words of its own, is left out by the packing's
novelty rule, else it follows, as history. Two facts restate one subject when they share
SUBJECT_MIN_OVERLAP of the shorter one's content words (numbers apart), each holds a word or
number the other does not, and the newer says something changed ("now", "moved", "switched",
"raised"…) or both hold numbers and they differ. Newer is by the time each is about, then by
what was said last. Facts and turns cut to their passage are moved, among at most the
candidates a block reads (`max_limit`), each compared by its first MAX_CHARS characters; such a
turn by its sentence that the question is about (it says many things, one value among them).
A short line of chat stays where it was ranked: on LoCoMo, moving those cost answer words.
"""

from __future__ import annotations

import re

from forged.models import MemoryItem
from forged.recall.passages import CUT, focus
from forged.text.grounding import GENERIC, SUBJECT_MIN_OVERLAP, claim

__all__ = ["MAX_CHARS", "newest_first", "restates"]

MAX_CHARS = 600  # characters of a fact compared: its subject is said in its first sentences
_CHANGE = re.compile(  # words that say a value changed
    r"\b(?:now|moved|changed|switched|instead|raised|lowered|upgraded|downgraded|increased|"
    r"decreased|no longer|any ?more|from now on|went up|went down)\b",
    re.IGNORECASE,
)


def _terms(text: str) -> tuple[frozenset[str], frozenset[str], bool]:
    """Of a fact's first MAX_CHARS characters: the content words, those with its numbers, and
    whether it says something changed."""
    text = text[:MAX_CHARS]
    said = claim(text)
    words = frozenset(said.words - GENERIC)
    return words, words | said.numbers, bool(_CHANGE.search(text))


def _restates(
    newer: tuple[frozenset[str], frozenset[str], bool],
    older: tuple[frozenset[str], frozenset[str], bool],
) -> bool:
    """Whether the newer fact says the older one's subject (shared content words) with a
    changed value: it says so, or both hold numbers and they differ; and each holds a word or
    number the other does not."""
    shared = len(newer[0] & older[0])
    subject = shared and shared >= SUBJECT_MIN_OVERLAP * min(len(newer[0]), len(older[0]))
    numbers = (newer[1] - newer[0], older[1] - older[0])
    changed = newer[2] or (all(numbers) and numbers[0] != numbers[1])
    return bool(subject) and changed and bool(newer[1] - older[1]) and bool(older[1] - newer[1])


def restates(newer: str, older: str) -> bool:
    """Whether the text `newer` says `older`'s subject with a changed value (the rule above)."""
    return _restates(_terms(newer), _terms(older))


def _when(item: MemoryItem) -> tuple[str, int]:
    return item.last_at, item.last_seq


def _compared(item: MemoryItem) -> bool:
    """A fact, or a turn cut to its passage: a long turn says a value once among much else; a
    short line of chat that shares words with another is talk, seldom an update."""
    return item.type == "fact" or (item.type == "interaction" and CUT in item.text)


def newest_first(items: list[MemoryItem], question: str = "") -> list[MemoryItem]:
    """The items in the same order but for facts and turns: each newer restatement of one's
    subject (see the module docstring) moved to just before it, the newest first. A turn is
    compared by its sentence holding most of the `question`'s words (forged.recall.passages)."""
    order = list(items)
    terms = {id(i): _terms(focus(i, question)) for i in order if _compared(i)}
    at = 0
    while at < len(order):
        item = order[at]
        later = [
            j
            for j in range(at + 1, len(order))
            if id(order[j]) in terms
            and id(item) in terms
            and _when(order[j]) > _when(item)
            and _restates(terms[id(order[j])], terms[id(item)])
        ]
        if later:
            j = max(later, key=lambda k: _when(order[k]))
            order.insert(at, order.pop(j))
            continue  # the moved one may itself have a newer restatement further down
        at += 1
    return order
