"""Topics: a batch's summary says what it was about, in a few of its words, not three lines.

The summary names who spoke and the TOPICS words said most across the kept lines (names count
twice; a word counts once a line; function words, greetings and reactions apart), in the
order first said: "Caroline talked about adoption, agencies, painting, Melanie and camping."
Every word of it but "talked about" is the transcript's own. One pass over the kept text.
"""

from __future__ import annotations

import re
from collections import Counter

from forged.distill.salience import SOCIAL_WORDS
from forged.text.grounding import STOPWORDS, stem

__all__ = ["MIN_LETTERS", "TOPICS", "summary"]

TOPICS = 6  # words a summary names
MIN_LETTERS = 4  # shorter words ("cat", "run") are too often function words or chatter
_TELLING = frozenset({"said", "says", "told", "tells", "asked", "asks", "photo", "shares"})  # how
# something is told, not what about
_WORD = re.compile(r"[^\W\d_][\w'\u2019-]*[^\W_]")  # a word of letters, inner ' or - allowed
_OPENERS = '.!?:"\u201c('  # what a sentence's first word follows, spaces apart


def _words(text: str, speakers: frozenset[str]) -> dict[str, tuple[str, bool]]:
    """A line's candidate words by stem: as folded, and whether it is written as a name
    (capitalised where no sentence starts)."""
    out: dict[str, tuple[str, bool]] = {}
    for m in _WORD.finditer(text):
        word = m.group()
        folded = word.casefold()
        if len(word) < MIN_LETTERS or folded in STOPWORDS or folded in _TELLING or "'" in word:
            continue
        if folded in speakers:
            continue
        key = stem(folded)
        if key in SOCIAL_WORDS:
            continue
        before = text[max(0, m.start() - 3) : m.start()].rstrip()
        named = word[0].isupper() and bool(before) and before[-1] not in _OPENERS
        was = out.get(key, (folded, False))
        out[key] = (word if named else was[0], was[1] or named)
    return out


def _joined(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def summary(speakers: list[str], texts: list[str]) -> str:
    """What the kept `texts` of these `speakers` were about; "" when they name nothing."""
    folded = frozenset(w.casefold() for s in speakers for w in s.split())
    counts: Counter[str] = Counter()
    shown: dict[str, str] = {}
    for text in texts:
        for key, (word, named) in _words(text, folded).items():
            counts[key] += 2 if named else 1
            if named or key not in shown:
                shown[key] = word
    best = {key for key, _ in counts.most_common(TOPICS)}
    if not best:
        return ""
    said = [word for key, word in shown.items() if key in best]  # in the order first said
    return f"{_joined(list(dict.fromkeys(speakers)))} talked about {_joined(said)}."
