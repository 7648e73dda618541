"""Grounding: a deterministic check that a distilled text says only what its sources say.

A fact or summary is grounded when it is long enough to mean something, is not a bare number,
every name and number in it occurs in its source interactions (dates: within a year of theirs,
since the model turns "yesterday" into a date), and enough of its content words occur there.
Words are compared by a crude stem (case, plurals, tenses), so a paraphrase passes and an
invention does not. Calibrated on LoCoMo with `python -m bench.grounding`.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from forged.text.agreement import Places, clause_ends, clauses, partnered, places
from forged.text.stance import (
    ADDRESSING,
    Stance,
    conditional,
    fact_stance,
    flipped,
    stance,
)

__all__ = [
    "MAX_BOUND_NUMBERS",
    "MAX_BOUND_WORDS",
    "MAX_SOURCE_LINES",
    "MIN_CHARS",
    "MIN_COVERAGE",
    "MIN_LINE_COVERAGE",
    "MIN_SENTENCE_WORDS",
    "MONTHS",
    "NEAR_TURNS",
    "NUMBER_WORDS",
    "STEM_CHARS",
    "STOPWORDS",
    "WEEKDAYS",
    "YEAR_SLACK",
    "Claim",
    "Line",
    "Sources",
    "Verdict",
    "check",
    "claim",
    "stem",
]

MIN_CHARS = 12  # shorter texts ("ok", "34", "yes it is") are not memory
MIN_LINE_COVERAGE = 0.34  # share of a fact's content words one source line must hold: a third
MIN_SENTENCE_WORDS = 2  # a fact's sentence with fewer content words ("Wow.") is not checked alone
MIN_COVERAGE = 0.5  # share of a summary's content words that the sources must hold
MAX_SOURCE_LINES = 3  # a fact cites the interactions of at most this many lines
NEAR_TURNS = 2  # and of lines at most this many interactions from its best line
YEAR_SLACK = 1  # a date may lie this many years from the sources' dates ("last year")
STEM_CHARS = 6  # stems are cut to this many letters: counseling, counselor -> counse
STEM_CACHE = 1 << 16  # words whose stems are kept: a batch repeats most of its words
MAX_POSTINGS = 512  # lines a check counts per term (a term of more lines tells few apart)
HELD_MEMO = 4096  # sets of terms whose line counts a batch's Sources remembers
CANDIDATE_LINES = 8  # lines a sentence's polarity is compared with: those holding most of it
CLAUSE_POSTINGS = 64  # clauses of a line counted per term (a word of more tells few apart)
MAX_BOUND_WORDS = 64  # a fact sentence's numbers are checked beside its words up to this many
MAX_BOUND_NUMBERS = 8  # and so many of its numbers (a fact is a sentence, not a table)
PARTNER_LINES = 32  # lines holding a name or number searched for its partner
MIN_PARTNERED = 2  # a sentence with this many names and numbers keeps each beside its partner
SUBJECT_MIN_OVERLAP = 0.5  # a replaced fact shares this share of the shorter one's content words
GENERIC = frozenset({"user"})  # words every fact of a scope may hold: they name no subject
FIRST_PERSON = frozenset({"i", "i'm", "i've", "i'd", "i'll", "my", "me", "mine", "myself"})
USER_WORDS = FIRST_PERSON | {"user"}  # a fact with one is about the user
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
_SENTENCE_BREAK = re.compile(r"[.!?:;]\s+")  # a sentence starts at the next letter after one
_ALNUM = re.compile(r"[^\W_]")  # a letter or digit
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")  # where a fact's next sentence starts
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# A speaker's label before what a line says ("Caroline: "); one inside what was said is quoted
# transcript structure (Bob typing "Caroline: I moved"), not a speaker.
_LABEL = re.compile(r"^\s*([^:\s][^:]{0,39}):\s+")
_QUOTED_LABEL = re.compile(r"\s*[^\W\d_][\w'-]{0,39}:\s+")  # one word: "Caroline: ", "SYSTEM: "
_SUFFIXES = ("'s", "\u2019s", "ies", "ied", "ing", "ed", "es", "s", "ly")


@functools.lru_cache(maxsize=STEM_CACHE)
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


def _sentence_starts(text: str) -> set[int]:
    """Where the sentences of a text start: the first letter or digit of the text and the first
    after each sentence break. Linear: a break before the letter already found finds it again."""
    starts: set[int] = set()
    found = -1  # the letter found last
    for at in itertools.chain((0,), (m.end() for m in _SENTENCE_BREAK.finditer(text))):
        if at > found:
            if (m := _ALNUM.search(text, at)) is None:  # else an underscore, as `[\W_]*\w` says
                found = text.rfind("_", at)
                starts.update([found] if found >= 0 else [])
                break
            found = m.start()
        starts.add(found)
    return starts


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


def _term(token: str) -> str:
    """A token as evidence: the number it spells, or its stem."""
    return (_number(token) if token[0].isdigit() else None) or stem(token)


def _order(tokens: list[str]) -> tuple[str, ...]:
    """The terms of content tokens, in the order written (stop words left out)."""
    return tuple(_term(t) for t in tokens if t.casefold() not in STOPWORDS)


Clause = tuple[frozenset[str], Stance]  # a clause's terms (its antonyms as ~word), its stance


def _opposites(st: Stance) -> set[str]:
    """A stance's antonyms as terms: "hate" and "love" both hold ~love."""
    return {"~" + word for word, _ in st.antonyms}


def _clauses(text: str, positioned: list[tuple[int, str]]) -> tuple[Clause, ...]:
    """The clauses of a line (forged.text.agreement) as their terms and stances: a clause that
    ends in "?" is a question; "if" or "unless" hedges every clause of its sentence."""
    ends = list(clause_ends(text))
    starts = [m.start() for m in ends]
    groups: dict[int, list[str]] = {}
    for at, token in positioned:
        groups.setdefault(bisect.bisect(starts, at), []).append(token)
    sentence: list[int] = []  # the clauses of the sentence being read
    conditions: dict[int, tuple[bool, bool]] = {}  # each clause's sentence: conditional, qualified
    for k in range(len(ends) + 1):
        sentence.append(k)
        if k == len(ends) or any(c in ends[k].group(0) for c in ".!?"):
            said = conditional(t for c in sentence for t in groups.get(c, ()))
            conditions.update(dict.fromkeys(sentence, said))
            sentence = []
    out = []
    for k, words in groups.items():
        asked = k < len(ends) and "?" in ends[k].group(0)
        st = stance(words, question=asked, sentence=conditions[k], stop=STOPWORDS)
        out.append((frozenset(map(_term, words)) | _opposites(st), st))
    return tuple(out)


# Where a stretch a number is bound in ends: a sentence, and "and" or "but"; a run of stops or
# spaces is tried from its start only (linear, not quadratic).
_BINDING_END = re.compile(r"(?<![;.!?])[;.!?]+(?=\s|$)|(?<!\s)\s+(?:and|but)\s+")
_CHANGE = re.compile(r"\bfrom\s+(\S+)\s+to\s+(\S+)", re.IGNORECASE)  # "from Monday to Thursday"


def _bindings(text: str, positioned: list[tuple[int, str]]) -> dict[str, list[frozenset[str]]]:
    """Each number of a line with the terms of the stretches (its sentences, cut also at "and"
    and "but") that hold it, at most CLAUSE_POSTINGS of them: "bought it in 2019 and sold it
    in 2023" binds 2023 to "sold" alone; "painted it last year, in 2022" binds 2022 to
    "painted". Each stretch's terms are built once and shared: linear in the line."""
    starts = [m.start() for m in _BINDING_END.finditer(text)]
    groups: dict[int, set[str]] = {}
    for at, token in positioned:
        groups.setdefault(bisect.bisect(starts, at), set()).add(_term(token))
    out: dict[str, list[frozenset[str]]] = {}
    for terms in map(frozenset, groups.values()):
        for n in terms:
            if n[:1].isdigit() and len(held := out.setdefault(n, [])) < CLAUSE_POSTINGS:
                held.append(terms)
    return out


def _changes(said: str) -> frozenset[tuple[str, str]]:
    """The values a line says something changed from and to (names, numbers, days)."""
    return frozenset(
        (_term(a), _term(b))
        for a, b in (
            (m.group(1).strip(".,;"), m.group(2).strip(".,;")) for m in _CHANGE.finditer(said)
        )
        if a and b and (a[0].isupper() or a[0].isdigit() or a.casefold() in WEEKDAYS)
    )


@dataclass(frozen=True)
class Line:
    """One line of a source interaction as evidence: its word stems and numbers, who said it,
    its terms in order and its clauses (their terms, and whether each is negated)."""

    seq: int
    stems: frozenset[str]
    numbers: frozenset[str]
    dated: bool = False  # what the interaction's date supports, not what was said
    speaker: str | None = None
    order: tuple[str, ...] = ()
    clauses: tuple[Clause, ...] = ()
    first_person: bool = False  # says "I" or "my": about its speaker, whoever it names
    names: frozenset[str] = frozenset()  # stems of its capitalised words inside sentences
    quoted: frozenset[str] = frozenset()  # speaker labels inside what was said, taken out
    addressing: bool = False  # its speaker speaks to another ("you", "let's"): advice, asking
    bindings: dict[str, list[frozenset[str]]] = field(default_factory=dict, compare=False)
    changes: frozenset[tuple[str, str]] = frozenset()  # values it says changed (from, to)
    terms: frozenset[str] = field(default=frozenset(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "terms", self.stems | self.numbers)

    @functools.cached_property
    def places(self) -> Places:
        """Where each term of `order` is first and last; built when first asked."""
        return places(self.order)

    @functools.cached_property
    def clauses_holding(self) -> dict[str, list[int]]:
        """The clauses (their indices) holding each term, at most CLAUSE_POSTINGS a term: a
        sentence's polarity reads only its own words' clauses, linear in it whatever the line."""
        out: dict[str, list[int]] = {}
        for i, (terms, _) in enumerate(self.clauses):
            for term in terms:
                if len(held := out.setdefault(term, [])) < CLAUSE_POSTINGS:
                    held.append(i)
        return out

    @classmethod
    def of(cls, seq: int, text: str) -> Line:
        speaker, said, quoted = None, text, set()
        if m := _LABEL.match(text):
            speaker, said = m.group(1).strip(), text[m.end() :]
            at = 0  # quoted labels are no evidence of who spoke (matched in place: linear)
            while n := _QUOTED_LABEL.match(said, at):
                quoted.add(stem(n.group(0).strip().rstrip(":")))
                at = n.end()
            said = said[at:]
            text = f"{speaker}: {said}"
        positioned = _positioned(text)
        tokens = [token for _, token in positioned]
        numbers = frozenset(filter(None, map(_number, tokens)))
        first = speaker is not None and bool({t.casefold() for t in tokens} & FIRST_PERSON)
        said_from = len(text) - len(said)  # what was said starts there (after the label)
        starts = _sentence_starts(said)
        names = frozenset(
            stem(t)
            for at, t in positioned
            if at >= said_from and t[0].isupper() and at - said_from not in starts
        )
        order = _order([t for at, t in positioned if at >= said_from])  # who spoke has no place
        folded = {t.casefold() for t in tokens}
        return cls(
            seq,
            frozenset(map(stem, tokens)),
            numbers,
            False,
            speaker,
            order,
            _clauses(text, positioned),
            first,
            names,
            frozenset(quoted),
            speaker is not None and bool(folded & ADDRESSING),
            _bindings(text, positioned),
            _changes(said),
        )


def _plain(text: str) -> str:
    """A text as a verbatim copy is compared: whitespace collapsed, case folded, no final stop."""
    return " ".join(text.split()).casefold().rstrip(".")


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
    """The evidence of one batch: every line of its interactions, and each interaction's date,
    indexed by term (a check looks only at the lines holding its words); `users`, when known,
    are the speakers who are the user ("the user", "I" in a fact)."""

    def __init__(self, lines: Iterable[Line], users: Iterable[str] | None = None) -> None:
        self.lines = list(lines)
        self.index: dict[str, list[int]] = {}
        for i, line in enumerate(self.lines):
            for term in line.terms:
                self.index.setdefault(term, []).append(i)
        self.stems = frozenset().union(*(line.stems for line in self.lines))
        self.numbers = frozenset().union(*(line.numbers for line in self.lines))
        self.years = {int(n) for n in self.numbers if len(n) == 4 and n.isdigit()}
        self.users = None if users is None else frozenset(users)
        self.speakers = {line.speaker for line in self.lines if line.speaker}
        self.names = frozenset().union(*(line.names for line in self.lines))
        self.quoted = frozenset().union(*(line.quoted for line in self.lines))
        self._held: dict[frozenset[str], Counter[int]] = {}
        self.said_numbers = frozenset(
            n for line in self.lines if not line.dated for n in line.numbers
        )
        self.changed: dict[str, set[str]] = {}  # a value something changed from: to what
        for line in self.lines:
            for a, b in line.changes:
                self.changed.setdefault(a, set()).add(b)
        self.verbatim: dict[str, int] = {}  # a line as written (see `_plain`): its seq

    def add_verbatim(self, seq: int, line: str) -> None:
        """Remember a line as written, with and without its speaker's label, unless the rest
        starts with a label naming one of the speakers (typed to look like another's line)."""
        self.verbatim.setdefault(_plain(line), seq)
        if m := _LABEL.match(line):
            said = line[m.end() :]
            if not (
                (n := _LABEL.match(said))
                and n.group(1).strip() in self.speakers | (self.users or set())
            ):
                self.verbatim.setdefault(_plain(said), seq)

    @classmethod
    def of(
        cls, texts: Iterable[tuple[int, str | None, str]], users: Iterable[str] | None = None
    ) -> Sources:
        """Sources from (seq, ISO date or None, text) triples; the text may hold many lines,
        each perhaps starting with its speaker's label ("Caroline: ...")."""
        lines: list[Line] = []
        written: list[tuple[int, str]] = []
        for seq, when, text in texts:
            said = [line for line in text.splitlines() if line.strip()]
            lines += [Line.of(seq, line) for line in said]
            written += [(seq, line) for line in said]
            if when and (date := _date_line(seq, when)):
                lines.append(date)
        sources = cls(lines, users)
        for seq, line in written:
            sources.add_verbatim(seq, line)
        return sources

    def holding(self, terms: Iterable[str]) -> Counter[int]:
        """How many of the terms each line holds (by its index in `lines`), counting at most
        MAX_POSTINGS lines a term: a word of every line tells none apart, and costs a check
        no more than that. Remembered per set of terms (a fact's sentences repeat)."""
        key = frozenset(terms)
        if (held := self._held.get(key)) is None:
            held = Counter(i for t in key for i in self.index.get(t, ())[:MAX_POSTINGS])
            if len(self._held) < HELD_MEMO:
                self._held[key] = held
        return held

    def placed_holding(self, term: str) -> list[tuple[int, Places]]:
        """The lines holding a term, at most PARTNER_LINES of them: each its index and where
        its terms are (forged.text.agreement.places)."""
        return [(i, self.lines[i].places) for i in self.index.get(term, ())[:PARTNER_LINES]]


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
    leading: set[str] = field(default_factory=set)  # capitalised words that start a sentence


def _is_day(tokens: list[str], i: int, n: str) -> bool:
    """Whether the number at i is the day of a date (next to a month name)."""
    if not (n.isdigit() and 1 <= int(n) <= 31):
        return False  # most numbers of a long line: no need to read the words around
    near = {t.casefold() for t in tokens[max(i - 2, 0) : i + 3]}
    return bool(near & set(MONTHS))


def claim(text: str) -> Claim:
    """The names, numbers, years and content-word stems a text asserts."""
    positioned = _positioned(text)
    tokens = [token for _, token in positioned]
    starts = _sentence_starts(text)
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
            else:
                out.leading.add(stem(token))
        elif len(low) >= 3:
            out.words.add(stem(token))
    return out


def _best_lines(
    words: set[str],
    sources: Sources,
    most: int,
    near: int | None = None,
    allowed: frozenset[str] | None = None,
) -> tuple[list[Line], int]:
    """Up to `most` lines, greedily, that hold the most of `words`, and how many they hold;
    with `near`, the lines after the first from interactions at most that many seqs from it
    (a fact is dated by what it cites: a name it shares with a turn of another day is no
    reason to date it then); with `allowed`, only lines those speakers said. Only the lines
    the index gives for the words are looked at."""
    chosen: list[Line] = []
    wanted = set(words)
    while wanted and len(chosen) < most:
        held = sources.holding(wanted)
        lines = [
            (n, -i)
            for i, n in held.items()
            if _may_cite(sources.lines[i], allowed, near, chosen, sources.users)
        ]
        if not lines:
            break
        best = sources.lines[-max(lines)[1]]
        chosen.append(best)
        wanted -= best.terms
    return chosen, len(words) - len(wanted)


def _may_cite(
    line: Line,
    allowed: frozenset[str] | None,
    near: int | None,
    chosen: list[Line],
    users: frozenset[str] | None,
) -> bool:
    if not _about(line, allowed, users):
        return False
    return near is None or not chosen or abs(line.seq - chosen[0].seq) <= near


def _about(line: Line, allowed: frozenset[str] | None, users: frozenset[str] | None = None) -> bool:
    """Whether a line may support a fact about the `allowed` speakers: it is theirs, or it says
    nothing in the first person (what one says of oneself is no evidence about another), nor,
    said by someone who is not a user (the assistant), to the user ("you should use X",
    "let's book it"): a suggestion to the user is not what the user said or decided."""
    if allowed is None or line.speaker in allowed:
        return True
    if line.first_person:
        return False
    return not (line.addressing and users is not None and line.speaker not in users)


def _said_years(asserted: Claim, sources: Sources) -> set[str]:
    """The text's years that a line says (not just its date): they tie the text to that line
    like any other number ("push-1901" and "push-1902" differ only there)."""
    return set(map(str, asserted.years)) & sources.said_numbers


def _speakers_meant(text: str, sources: Sources) -> frozenset[str] | None:
    """The speakers a fact is about: those it names, and the user's when it says "the user"
    or "I"; None when it is about none of them (anyone's line may support it)."""
    folded = {t.casefold() for t in _tokens(text)}
    stems = {stem(t) for t in folded}
    meant = {s for s in sources.speakers if all(stem(t) in stems for t in _tokens(s))}
    if sources.users is not None and folded & USER_WORDS:
        meant |= sources.users
    return frozenset(meant) if meant else None


def check(text: str, sources: Sources, *, summary: bool = False) -> Verdict:
    """Whether `text` is grounded in the sources, and which interactions support it.

    A line copied word for word is grounded by definition. Otherwise a fact must find
    MIN_LINE_COVERAGE of its content words in one source line (it restates something said),
    one said by the speakers it is about, and so must each of its sentences, in agreement with
    that line (forged.text.agreement, forged.text.stance); a summary MIN_COVERAGE of them
    anywhere in the sources (it restates many).
    """
    if len(text.strip()) < MIN_CHARS:
        return Verdict([], f"shorter than {MIN_CHARS} characters")
    if (seq := sources.verbatim.get(_plain(text))) is not None:
        return Verdict([seq])
    asserted = claim(text)
    if not asserted.words and not asserted.names:
        return Verdict([], "no words, only numbers or stopwords")
    # A fact's first word may be the name a quoted label gave ("Caroline: I moved", typed by Bob).
    leading = asserted.leading & sources.quoted
    if missing := sorted((asserted.names | leading) - sources.stems):
        return Verdict([], f"names not in the sources: {', '.join(missing)}")
    if missing := sorted(asserted.numbers - sources.numbers):
        return Verdict([], f"numbers not in the sources: {', '.join(missing)}")
    if any(all(abs(y - s) > YEAR_SLACK for s in sources.years) for y in asserted.years):
        return Verdict([], "a year far from the sources' dates")
    cited = asserted.words | asserted.names | asserted.numbers | _said_years(asserted, sources)
    if summary:
        share = len(asserted.words & sources.stems) / max(len(asserted.words), 1)
        lines, _ = _best_lines(cited, sources, MAX_SOURCE_LINES * 4)
        if asserted.words and share < MIN_COVERAGE:
            return Verdict([], f"{share:.0%} of its content words in the sources")
        return Verdict(sorted({line.seq for line in lines}))
    allowed = _speakers_meant(text, sources)
    if missing := sorted(n for n in asserted.names if not _said_by(n, sources, allowed)):
        where = ", ".join(sorted(allowed or ()))
        return Verdict([], f"names not in what {where} said: {', '.join(missing)}")
    words = asserted.words
    _, found = _best_lines(words, sources, 1, allowed=allowed)
    share = found / max(len(words), 1)
    if words and share < MIN_LINE_COVERAGE:
        where = f"what {', '.join(sorted(allowed))} said" if allowed else "the sources"
        return Verdict([], f"{share:.0%} of its content words in {where}")
    if weak := _unsupported_sentence(text, sources, allowed):
        return Verdict([], weak)
    lines, _ = _best_lines(cited, sources, MAX_SOURCE_LINES, NEAR_TURNS)
    return Verdict(sorted({line.seq for line in lines}))


def _said_by(term: str, sources: Sources, allowed: frozenset[str] | None) -> bool:
    """Whether a line that may support a fact about `allowed` holds the term (of the first
    MAX_POSTINGS lines holding it), or a user's line does: a name only the assistant
    suggested to the user ("you should use PostgreSQL") is not the user's."""
    users = sources.users
    if allowed is None or users is None:
        return True
    lines = (sources.lines[i] for i in sources.index.get(term, ())[:MAX_POSTINGS])
    return any(n.speaker is None or n.speaker in users or _about(n, allowed, users) for n in lines)


def _unsupported_sentence(
    text: str, sources: Sources, allowed: frozenset[str] | None
) -> str | None:
    """Why one sentence of a fact says what no source line does (a small model writes a true
    sentence, then invents the next), or what its line says otherwise (forged.text.stance),
    or puts a name or number beside another's partner; or None."""
    sentences = _SENTENCE_END.split(text.strip())
    for sentence in sentences:
        asserted = claim(sentence)
        words = asserted.words
        if len(sentences) > 1 and len(words) >= MIN_SENTENCE_WORDS:
            _, found = _best_lines(words, sources, 1, allowed=allowed)
            if found / len(words) < MIN_LINE_COVERAGE:
                return f"a sentence with {found / len(words):.0%} of its content words in one line"
        if words and (otherwise := _said_otherwise(sentence, sources, allowed)):
            return otherwise
        if lost := _unbound(sentence, asserted, sources, allowed):
            return lost
        items = asserted.names | asserted.numbers | (asserted.leading & sources.names)
        if len(items) >= MIN_PARTNERED:
            order = list(_order(_tokens(sentence)))
            if lost := partnered(order, items, sources.placed_holding):
                return f"puts {lost} beside words its source does not"
    return None


def _unbound(
    sentence: str, asserted: Claim, sources: Sources, allowed: frozenset[str] | None
) -> str | None:
    """Why the sentence takes a value from elsewhere in its line: a number said only beside
    none of its words ("bought in 2019 and sold in 2023" is no "bought in 2023"), or a value
    its source says something changed from, without the change ("is on Monday" for "moved
    from Monday to Thursday"); or None."""
    tokens = _tokens(sentence)
    terms = {_term(t) for t in tokens}
    words = {t for t in terms if not t[:1].isdigit() and t not in STOPWORDS} - GENERIC
    numbers = sorted(asserted.numbers | _said_years(asserted, sources))
    if not words or len(words) > MAX_BOUND_WORDS:
        numbers = []  # nothing to bind a number to, or a sentence too long to tell by
    for n in numbers[:MAX_BOUND_NUMBERS]:
        holding = [sources.lines[i] for i in sources.index.get(n, ())[:CANDIDATE_LINES]]
        bound = [b for line in holding for b in line.bindings.get(n, ())]
        if bound and all(words.isdisjoint(b) for b in bound):
            return f"puts {n} beside words its source does not"
    if "from" not in terms:
        for value in terms & sources.changed.keys():
            if not terms & sources.changed[value]:
                return f"gives {value} as it is, where its source says it changed from it"
    return None


_OTHERWISE = {  # what a clause's stance may disagree in, and how the refusal says it
    "polarity": "says the opposite of its source (a negation or an antonym on one side only)",
    "hedge": "states as certain what its source hedges, makes conditional or asks",
    "qualifier": "drops its source's qualifier (until, former, used to)",
    "owner": "says of its subject what its source says of someone of theirs (my wife, my son)",
}


def _said_otherwise(sentence: str, sources: Sources, allowed: frozenset[str] | None) -> str | None:
    """Why a clause of the sentence says otherwise than its sources (see `_disagreement`)."""
    meant = {stem(t) for t in _tokens(sentence)}  # whose: anywhere in the sentence
    asked = "?" in sentence  # a fact that asks keeps its source's question
    for part in clauses(sentence):
        asserted = claim(part)
        words = asserted.words - GENERIC
        mine = fact_stance(_tokens(part), question=asked)
        if words and (key := _disagreement(mine, words | asserted.names, meant, sources, allowed)):
            return _OTHERWISE[key]
    return None


def _disagreement(
    mine: Stance,
    words: set[str],
    meant: set[str],
    sources: Sources,
    allowed: frozenset[str] | None,
) -> str | None:
    """How the clauses holding most of a fact clause's words (and names) say otherwise than
    it (`mine`: its stance), or None: for each respect of `_OTHERWISE`, a clause disagreeing
    with it holds more of its words (and enough of them) than every clause agreeing with it
    does (`meant`: the stems of its whole sentence, where it may name whose it is). One pass
    over the clauses sharing its words, a few operations each."""
    held = sources.holding(words)
    enough = len(words) * MIN_LINE_COVERAGE
    lines = [sources.lines[i] for i, n in held.most_common(CANDIDATE_LINES) if n >= enough]
    words = words | _opposites(mine)  # "love" and "hate" both hold ~love: counted alike
    best = [[0, 0] for _ in _OTHERWISE]  # per respect, the most words: disagreeing, agreeing
    users = allowed is not None and allowed == sources.users and bool(meant & USER_WORDS)
    for line in [n for n in lines if _about(n, allowed, sources.users)]:
        postings = line.clauses_holding
        shared = Counter(c for w in words for c in postings.get(w, ()))
        own = allowed is None or line.speaker in allowed  # their own hedges and questions
        for c, n in shared.items():
            agrees = _agreements(mine, line.clauses[c][1], meant, own, users)
            for most, agree in zip(best, agrees, strict=True):
                if n > most[agree]:
                    most[agree] = n
    for key, (against, agreeing) in zip(_OTHERWISE, best, strict=True):
        if against > agreeing and against >= enough:
            return key
    return None


def _agreements(
    mine: Stance, theirs: Stance, meant: set[str], own: bool, user: bool
) -> tuple[bool, bool, bool, bool]:
    """Whether a fact's clause (`mine`, its sentence's stems `meant`) agrees with a source
    clause in each respect of `_OTHERWISE`, in its order. A hedge or question counts in the
    fact's subject's own lines (`own`: another's question answered is no hedge of theirs);
    whose it is, in a fact about the user (`user`: "the user runs" for "my wife runs")."""
    polarity = mine.negated == theirs.negated
    if mine.antonyms and theirs.antonyms:  # rare: an antonym on each side may turn one round
        polarity ^= flipped(mine.antonyms, theirs.antonyms) ^ flipped(
            theirs.antonyms, mine.antonyms
        )
    return (
        polarity,
        mine.hedged or not (own and theirs.hedged),
        mine.qualified or not theirs.qualified,
        theirs.owner is None or not user or stem(theirs.owner) in meant,
    )


def subject_share(a: str, b: str) -> float:
    """The share of the shorter text's content words (generic ones apart) the other holds:
    how much two facts are about the same thing."""
    wa, wb = claim(a).words - GENERIC, claim(b).words - GENERIC
    return len(wa & wb) / max(1, min(len(wa), len(wb)))
