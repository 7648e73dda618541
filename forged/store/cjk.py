"""Chinese, Japanese and Korean as a word-based full-text index can search them: each run of
ideographs, kana or hangul written out as its single characters and their overlapping pairs.

FTS5's unicode61 tokenizer and PostgreSQL's parser cut words at spaces and punctuation, which
these scripts do not write between words: a whole sentence would be one token, and a word
inside it never found. Pairs of characters ("bigrams") are what most CJK word lengths are; the
single characters find one-character words and the edges of the pairs. Indexed text and query
text go through the same function, so a word of the query matches the same pairs in a memory.
Linear in the text's length: one pass of a regular expression, two strings per character.
"""

from __future__ import annotations

import re
from operator import add

__all__ = ["CJK_RUN", "SQL_FUNCTION", "cjk_grams"]

# Runs of the scripts written without spaces between words (and hangul, whose words carry
# particles): Hangul Jamo, CJK radicals, the ideographic iteration marks, hiragana, katakana,
# compatibility Jamo, bopomofo, CJK extension A, unified ideographs, Hangul Jamo extended and
# syllables, compatibility ideographs, half-width katakana, and the supplementary ideographs.
CJK_RUN = (
    "[\u1100-\u11ff\u2e80-\u2fdf\u3005-\u3007\u3021-\u3029\u3031-\u3035\u303b\u3040-\u30ff"
    "\u3105-\u312f\u3130-\u318f\u31a0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f"
    "\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]+"
)
SQL_FUNCTION = "cjk_grams"  # the name both stores' schemas call it by
_RUN = re.compile(CJK_RUN)


def _grams(run: re.Match[str]) -> str:
    """A run as its characters and overlapping pairs, in reading order, set apart by spaces:
    "東京都" is " 東 東京 京 京都 都 " (a query cut short keeps the start of what it said)."""
    text = run.group()
    grams = [""] * (2 * len(text) - 1)
    grams[0::2] = text
    grams[1::2] = map(add, text, text[1:])
    return f" {' '.join(grams)} "


def cjk_grams(text: str) -> str:
    """The text with each CJK run written as its characters and their overlapping pairs; text
    without one comes back as it is."""
    if not _RUN.search(text):
        return text
    return _RUN.sub(_grams, text)
