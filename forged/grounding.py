"""Grounding: a deterministic check that a distilled text says only what its sources say.

A fact or summary is grounded when it is long enough to mean something, is not a bare number,
every name and number in it occurs in its source interactions (dates: within a year of theirs,
since the model turns "yesterday" into a date), and enough of its content words occur there.
Words are compared by a crude stem (case, plurals, tenses), so a paraphrase passes and an
invention does not. Calibrated on LoCoMo with `python -m bench.grounding`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

MIN_CHARS = 12  # shorter texts ("ok", "34", "yes it is") are not memory
MIN_LINE_COVERAGE = 0.34  # share of a fact's content words one source line must hold: a third
MIN_SENTENCE_WORDS = 2  # a fact's sentence with fewer content words ("Wow.") is not checked alone
MIN_COVERAGE = 0.5  # share of a summary's content words that the sources must hold
MAX_SOURCE_LINES = 3  # a fact cites the interactions of at most this many lines
NEAR_TURNS = 2  # and of lines at most this many interactions from its best line
YEAR_SLACK = 1  # a date may lie this many years from the sources' dates ("last year")
STEM_CHARS = 6  # stems are cut to this many letters: counseling, counselor -> counse
# Words too common to tell one text from another; not content words.
STOPWORDS = frozenset(
    (  # noqa: SIM905 - a paragraph of words reads better than a column of quotes
        "a about above after again against all also am an and any are as at be because been "
        "before being below between both but by can could did do does doing done down during each "
        "even ever few for from further get gets got had has have having he her here hers herself "
        "him himself his how i if in into is it its itself just let like lot lots me more most "
        "much my myself no nor not now of off on once one only or other our ours ourselves out "
        "over own really same she should so some such than that the their theirs them themselves "
        "then there these they this those through to too under until up very was we were what "
        "when where which while who whom why will with would you your yours yourself yourselves "
        "oh yeah yes ok okay hey hi hello wow thanks thank something anything everything someone "
        "anyone everyone things thing way ways well still many may might must shall us going "
        "gonna quite pretty"
    ).split()
)
MONTHS = (  # noqa: SIM905 - in calendar order: a month's number is its index + 1
    "january february march april may june july august september october november december"
).split()
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
NUMBER_WORDS = {  # spelled-out numbers compare equal to digits
    w: str(n)
    for n, words in enumerate(
        [
            (),
            ("one", "first", "once"),
            ("two", "second", "twice"),
            ("three", "third"),
            ("four", "fourth"),
            ("five", "fifth"),
            ("six", "sixth"),
            ("seven", "seventh"),
            ("eight", "eighth"),
            ("nine", "ninth"),
            ("ten", "tenth"),
            ("eleven",),
            ("twelve",),
        ]
    )
    for w in words
}
_TOKEN = re.compile(r"[^\W\d_][\w'\u2019-]*|\d[\d,.]*\w*")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+)[\W_]*\w")  # ends on a sentence's first letter
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")  # where a fact's next sentence starts
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SUFFIXES = ("'s", "\u2019s", "ies", "ied", "ing", "ed", "es", "s", "ly")


def stem(word: str) -> str:
    """A crude stem: lower case, no possessive, plural, tense or adverb ending, cut short."""
    w = word.casefold()
    for suffix in _SUFFIXES:
        if w.endswith(suffix) and len(w) - len(suffix) >= (5 if suffix == "ly" else 3):
            w = w[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
            break
    w = w.rstrip("'\u2019-")
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiouls":  # running -> runn -> run
        w = w[:-1]
    return w.rstrip("e")[:STEM_CHARS] if len(w) > 3 else w


def _number(token: str) -> str | None:
    """The number a token spells (digits, ordinals, number words), else None."""
    if m := _NUMBER.match(token):
        n = m.group(0).replace(",", "").rstrip(".")
        return str(int(n)) if n.isdigit() else n  # 09 is 9
    return NUMBER_WORDS.get(token.casefold())


def _positioned(text: str) -> list[tuple[int, str]]:
    """Words and numbers with where they start; a hyphenated word also as its parts."""
    out = []
    for m in _TOKEN.finditer(text):
        out.append((m.start(), m.group(0)))
        if "-" in m.group(0).strip("-"):
            out += [(m.start(), part) for part in m.group(0).split("-") if part]
    return out


def _tokens(text: str) -> list[str]:
    return [token for _, token in _positioned(text)]


@dataclass(frozen=True)
class Line:
    """One line of a source interaction as evidence: its word stems and numbers."""

    seq: int
    stems: frozenset[str]
    numbers: frozenset[str]
    dated: bool = False  # what the interaction's date supports, not what was said

    @property
    def terms(self) -> frozenset[str]:
        return self.stems | self.numbers

    @classmethod
    def of(cls, seq: int, text: str) -> Line:
        tokens = _tokens(text)
        return cls(seq, frozenset(map(stem, tokens)), frozenset(filter(None, map(_number, tokens))))


def _date_line(seq: int, when: str) -> Line | None:
    """What an interaction's date supports: its day, month, weekday, year, hour and minute."""
    try:
        d = datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        return None
    words = {MONTHS[d.month - 1], WEEKDAYS[d.weekday()]}
    numbers = {d.day, d.year, d.hour, d.hour % 12 or 12, d.minute}  # months go by name
    return Line(seq, frozenset(map(stem, words)), frozenset(map(str, numbers)), dated=True)


class Sources:
    """The evidence of one batch: every line of its interactions, and each interaction's date."""

    def __init__(self, lines: Iterable[Line]) -> None:
        self.lines = list(lines)
        self.stems = frozenset().union(*(line.stems for line in self.lines))
        self.numbers = frozenset().union(*(line.numbers for line in self.lines))
        self.years = {int(n) for n in self.numbers if len(n) == 4 and n.isdigit()}

    @classmethod
    def of(cls, texts: Iterable[tuple[int, str | None, str]]) -> Sources:
        """Sources from (seq, ISO date or None, text) triples; the text may hold many lines."""
        lines: list[Line] = []
        for seq, when, text in texts:
            lines += [Line.of(seq, line) for line in text.splitlines() if line.strip()]
            if when and (date := _date_line(seq, when)):
                lines.append(date)
        return cls(lines)


@dataclass(frozen=True)
class Verdict:
    """The check's answer: the interactions that support a text, or why nothing does."""

    sources: list[int]
    reason: str | None = None

    @property
    def grounded(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class Claim:
    """What a text asserts: its names, numbers, years, and content words (names apart)."""

    names: set[str]
    numbers: set[str]
    years: set[int]
    words: set[str]


def _is_day(tokens: list[str], i: int, n: str) -> bool:
    """Whether the number at i is the day of a date (next to a month name)."""
    near = {t.casefold() for t in tokens[max(i - 2, 0) : i + 3]}
    return n.isdigit() and 1 <= int(n) <= 31 and bool(near & set(MONTHS))


def claim(text: str) -> Claim:
    """The names, numbers, years and content-word stems a text asserts."""
    positioned = _positioned(text)
    tokens = [token for _, token in positioned]
    starts = {m.end() - 1 for m in _SENTENCE_START.finditer(text)}
    out = Claim(set(), set(), set(), set())
    for i, token in enumerate(tokens):
        low = token.casefold()
        if token[0].isdigit():
            n = _number(token) or token
            if len(n) == 4 and n.isdigit() and 1900 <= int(n) <= 2200:
                out.years.add(int(n))
            elif not _is_day(tokens, i, n):
                out.numbers.add(n)
        elif low in STOPWORDS or low in MONTHS or low in WEEKDAYS or low in NUMBER_WORDS:
            continue
        elif token[0].isupper():  # a name, or a word that starts a sentence
            if positioned[i][0] not in starts:
                out.names.add(stem(token))
        elif len(low) >= 3:
            out.words.add(stem(token))
    return out


def _best_lines(
    words: set[str], lines: list[Line], most: int, near: int | None = None
) -> tuple[list[Line], int]:
    """Up to `most` lines, greedily, that hold the most of `words`, and how many they hold;
    with `near`, the lines after the first from interactions at most that many seqs from it
    (a fact is dated by what it cites: a name it shares with a turn of another day is no
    reason to date it then)."""
    chosen: list[Line] = []
    wanted = set(words)
    while wanted and len(chosen) < most:
        best = max(lines, key=lambda line: len(wanted & line.terms), default=None)
        if best is None or not wanted & best.terms:
            break
        chosen.append(best)
        wanted -= best.terms
        if near is not None and len(chosen) == 1:  # the rest come from around the first
            lines = [line for line in lines if abs(line.seq - best.seq) <= near]
    return chosen, len(words) - len(wanted)


def _said_years(asserted: Claim, sources: Sources) -> set[str]:
    """The text's years that a line says (not just its date): they tie the text to that line
    like any other number ("push-1901" and "push-1902" differ only there)."""
    said = {n for line in sources.lines if not line.dated for n in line.numbers}
    return set(map(str, asserted.years)) & said


def check(text: str, sources: Sources, *, summary: bool = False) -> Verdict:
    """Whether `text` is grounded in the sources, and which interactions support it.

    A fact must find MIN_LINE_COVERAGE of its content words in one source line (it restates
    something said), and so must each of its sentences; a summary MIN_COVERAGE of them anywhere
    in the sources (it restates many).
    """
    if len(text.strip()) < MIN_CHARS:
        return Verdict([], f"shorter than {MIN_CHARS} characters")
    asserted = claim(text)
    if not asserted.words and not asserted.names:
        return Verdict([], "no words, only numbers or stopwords")
    if missing := sorted(asserted.names - sources.stems):
        return Verdict([], f"names not in the sources: {', '.join(missing)}")
    if missing := sorted(asserted.numbers - sources.numbers):
        return Verdict([], f"numbers not in the sources: {', '.join(missing)}")
    if any(all(abs(y - s) > YEAR_SLACK for s in sources.years) for y in asserted.years):
        return Verdict([], "a year far from the sources' dates")
    cited = asserted.words | asserted.names | asserted.numbers | _said_years(asserted, sources)
    if summary:
        share = len(asserted.words & sources.stems) / max(len(asserted.words), 1)
        lines, _ = _best_lines(cited, sources.lines, MAX_SOURCE_LINES * 4)
        needed = MIN_COVERAGE
    else:
        _, found = _best_lines(asserted.words, sources.lines, 1)
        share = found / max(len(asserted.words), 1)
        lines, _ = _best_lines(cited, sources.lines, MAX_SOURCE_LINES, NEAR_TURNS)
        needed = MIN_LINE_COVERAGE
    if asserted.words and share < needed:
        return Verdict([], f"{share:.0%} of its content words in the sources")
    if not summary and (weak := _unsupported_sentence(text, sources)):
        return Verdict([], weak)
    return Verdict(sorted({line.seq for line in lines}))


def _unsupported_sentence(text: str, sources: Sources) -> str | None:
    """Why one sentence of a fact of several says what no source line does (a small model
    writes a true sentence, then invents the next), or None."""
    sentences = _SENTENCE_END.split(text.strip())
    for sentence in sentences if len(sentences) > 1 else ():
        words = claim(sentence).words
        if len(words) < MIN_SENTENCE_WORDS:
            continue
        _, found = _best_lines(words, sources.lines, 1)
        if found / len(words) < MIN_LINE_COVERAGE:
            return f"a sentence with {found / len(words):.0%} of its content words in one line"
    return None


def content_share(text: str, sources: Iterable[str]) -> float:
    """The share of a text's content words (names included) found in the sources."""
    asserted = claim(text)
    words = asserted.words | asserted.names
    stems = {stem(t) for s in sources for t in _tokens(s)}
    return len(words & stems) / len(words) if words else 0.0
