"""Sentences: a text cut where one sentence ends and the next begins, each kept as written.

A sentence ends at `.`, `!` or `?` (with the closing quotes or brackets after it) followed by
space, when what follows starts a sentence: a capital or a digit in any script, a letter of a
script without case (Arabic, Hebrew, Thai...), or a small letter, for people who write without
capitals ("i moved. my sister stayed."). Before a small letter a stop does not end a sentence
after an abbreviation ("e.g.", "7 a.m.", "etc.", "vs.") or within an ellipsis ("so... but").
In Chinese and Japanese a full stop (U+3002, and the full-width U+FF01 and U+FF1F) ends one
whether space follows or not.
"""

from __future__ import annotations

import re

__all__ = ["ABBREVIATIONS", "sentences"]

ABBREVIATIONS = frozenset(  # words a stop follows inside a sentence, before a small letter
    {"etc", "vs", "cf", "approx", "incl", "esp", "dept", "fig", "mr", "mrs", "ms", "dr", "st"}
)  # and any word holding a stop ("e.g", "a.m") or of one letter
_CJK_STOPS = "\u3002\uff01\uff1f"  # full stop, full-width ! and ?: space after or not
_CANDIDATE = re.compile(  # a stop, what closes after it, then space or a CJK stop's end
    r"(?:[.!?][\"'\u201d\u2019)\]]*(?=\s+[\"'\u201c\u2018(\[]*(\S))"
    rf"|[{_CJK_STOPS}][\u300d\u300f\uff09\u201d]*(?=\s*(\S)))"
)
_WORD_BEFORE = 12  # characters read back from a stop for the word it ends (abbreviations are short)


def _ends(text: str, stop: int, start: str) -> bool:
    """Whether the stop at `stop`, followed by a sentence whose first character is `start`,
    ends a sentence."""
    if text[stop] in _CJK_STOPS or not start.islower():
        return True  # a CJK stop, or before a capital, a digit, a quote or a caseless letter
    if text[stop] != ".":
        return True  # "?" or "!" before a small letter: "what's up? sounds good"
    if stop > 0 and text[stop - 1] == ".":
        return False  # an ellipsis goes on: "so... but"
    word = text[max(0, stop - _WORD_BEFORE) : stop].split()[-1:] or [""]
    token = word[0].lstrip("\"'(\u201c").casefold()
    return not (token in ABBREVIATIONS or "." in token or len(token) == 1)


def sentences(text: str) -> list[str]:
    """The text's sentences, each as written (a closing quote with its sentence)."""
    out, start = [], 0
    for m in _CANDIDATE.finditer(text):
        if _ends(text, m.start(), m.group(1) or m.group(2) or ""):
            out.append(text[start : m.end()].strip())
            start = m.end()
    out.append(text[start:].strip())
    return [s for s in out if s]
