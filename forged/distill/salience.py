"""Salience: how much a transcript line is worth remembering, by a fixed, documented score.

A line is read sentence by sentence. A question, and a sentence with no content word left once
the words of greetings, thanks, sign-offs and reactions are set aside ("Wow, that's great!"),
count nothing; a line made only of those is small talk (`small_talk`) and is never kept. The
other sentences earn points (POINTS), and so does the line's place in the conversation:

- each date or time expression (yesterday, last week, May, Tuesday, 2023): 17; each name other
  than a speaker's: 9; each number: 12; a shared photo's caption: 9 x ln(1 + its content words);
- a decision, preference, state or correction said outright, in the first person or as a
  request (forged.distill.kinds' cues: "let's", "I prefer", "I moved", "actually"...): 5;
- answering a question (the line before, another speaker's, asks one): 15; drawing a reaction
  (the line after, another speaker's, opens with "wow", "congrats", "that's", "got it",
  "noted"...): 21;
- novelty: each content word said in no earlier line of the batch and in none of the scope's
  facts shown beside it: 1; each said in no other line of the batch: 2;
- each statement addressed to the listener ("You'd be a great counselor"): -4; each statement:
  -2 (many short sentences are chatter).

A line is kept when it scores KEEP_AT or more. The weights were fitted (a logistic fit, then a
search over whole points) to which LoCoMo turns its questions cite as evidence, on
conversations 1-5 only, and checked on 6-10 (docs/salience.md); the cues are general ones of
conversation, no word of LoCoMo's.
"""

from __future__ import annotations

import html
import math
import re
from collections import Counter, defaultdict
from collections.abc import Set
from dataclasses import dataclass

from forged.distill.kinds import TIME_WORDS, kind_of
from forged.text.grounding import Claim, claim, stem

__all__ = [
    "CUED_KINDS",
    "KEEP_AT",
    "POINTS",
    "SOCIAL_WORDS",
    "Cues",
    "Line",
    "cues",
    "scores",
    "small_talk",
    "words_of",
]

KEEP_AT = 28.0  # points a line needs: 35.7 % of LoCoMo conversations 1-5 reach it
CUED_KINDS = frozenset({"decision", "preference", "state", "correction"})  # said outright
Cues = defaultdict[str, float]  # what a line shows of each of POINTS' keys
POINTS = {  # what each cue earns (see the module docstring)
    "time": 17.0,  # per date or time expression
    "name": 9.0,  # per name other than a speaker's
    "number": 12.0,  # per number or year
    "caption": 9.0,  # x ln(1 + content words of a shared photo's caption)
    "answers": 15.0,  # the line before, another speaker's, asks a question
    "reaction": 21.0,  # the line after, another speaker's, reacts to this one
    "novel": 1.0,  # per content word new to the batch so far and to the known facts
    "rare": 2.0,  # per content word said in no other line of the batch
    "kind_cue": 5.0,  # a decision, preference, state or correction cue (forged.distill.kinds)
    "addressed": -4.0,  # per statement that starts with "you" or "your"
    "statement": -2.0,  # per statement
}
# Words of greetings, thanks, sign-offs and reactions: a sentence of only these says nothing.
SOCIAL_WORDS = frozenset(
    stem(w)
    for w in (  # noqa: SIM905 - a paragraph of words reads better than a column of quotes
        "hey hi hello hiya morning evening thanks thank cheers great good awesome amazing cool "
        "wow nice glad happy sweet love lovely sound sounds look looks super totally agree "
        "absolutely right true fun exciting excited proud care talk soon later bye goodbye see "
        "catch hear heard congrats congratulations luck appreciate means mean lot definitely "
        "sure wonderful fantastic incredible beautiful stunning gorgeous impressive interesting "
        "inspiring touched aww haha lol yep yup oh man buddy dude friend hope hopefully enjoy "
        "keep kind welcome problem worries night day bad sorry take"
    ).split()
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORDED = re.compile(r"[^\W_]")  # a letter or digit: where a word or number of a claim starts
_CONTRACTION = re.compile(
    r"(\w)(?:n['\u2019]t|['\u2019](?:s|m|re|ve|ll|d))\b", re.IGNORECASE
)  # "can't": "ca"
_CAPTION = re.compile(r"\[shares? ")  # a shared photo, as LoCoMo writes it: "[shares a cat]"
_ADDRESSED = re.compile(r"^(?:you|your|you're|you've|you'd|you'll)\b", re.IGNORECASE)
_REACTION = re.compile(  # how a listener answers news
    r"^(?:wow|whoa|woah|omg|oh|congrat\w*|that's|that is|sounds|so sorry|sorry|amazing|"
    r"awesome|cool|great|nice|really|no way|got it|noted|good to know|understood|agreed|"
    r"ok|okay|sure|will do)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Line:
    """One transcript line as salience reads it: who said it and what (photo caption apart)."""

    speaker: str
    text: str
    caption: str = ""

    @classmethod
    def of(cls, speaker: str, raw: str) -> Line:
        text = html.unescape(raw).strip()
        if not text.endswith("]"):  # a caption ends the line's last line
            return cls(speaker, text)
        m = _CAPTION.search(text, text.rfind("\n") + 1)  # its first "[share": one scan
        return (
            cls(speaker, text[: m.start()].strip(), text[m.end() : -1]) if m else cls(speaker, text)
        )

    def asks(self) -> bool:
        return self.text.rstrip().endswith("?")


def _sentences(text: str) -> list[str]:
    """The text's sentences, contractions cut to their word ("I'm" is "I", "that's" "that")."""
    plain = _CONTRACTION.sub(r"\1", text)
    return [s.strip() for s in _SENTENCE.split(plain) if s.strip()]


_Statement = tuple[str, Claim]  # a sentence that is no question, and what it claims


def _statements(text: str) -> list[_Statement]:
    """The text's sentences that are no question, each with its claim: read once, as every
    cue below asks of the same sentences. One without a letter or digit claims nothing."""
    return [(s, claim(s)) for s in _sentences(text) if not s.endswith("?") and _WORDED.search(s)]


def _content(said: Claim) -> set[str]:
    """A sentence's content-word stems, the social words left out."""
    return {w for w in said.words if w not in SOCIAL_WORDS}


def _says_something(said: Claim, speakers: set[str]) -> bool:
    return bool(_content(said) or said.names - speakers or said.numbers or said.years)


def _small_talk(statements: list[_Statement], speakers: set[str]) -> bool:
    return not any(_says_something(said, speakers) for _, said in statements)


def _speaker_stems(speakers: Set[str]) -> set[str]:
    return {stem(w) for s in speakers for w in s.split()}


def small_talk(text: str, speakers: frozenset[str] = frozenset()) -> bool:
    """Whether a line is only greetings, thanks, sign-offs, reactions or questions: no sentence
    of it states anything (a shared photo's caption aside)."""
    return _small_talk(_statements(Line.of("", text).text), _speaker_stems(speakers))


def _words(statements: list[_Statement]) -> set[str]:
    return {w for _, said in statements for w in _content(said)}


def words_of(line: Line) -> set[str]:
    """The content words a line states (its questions and small talk left out)."""
    return _words(_statements(line.text))


def _statement_cues(
    line: Line, statements: list[_Statement], speakers: set[str], cues: Cues
) -> None:
    """Add what the line's statements earn to `cues` (see POINTS)."""
    for sentence, said in statements:
        if not _says_something(said, speakers):
            continue
        cues["time"] += len(TIME_WORDS.findall(sentence))
        cues["name"] += len(said.names - speakers)
        cues["number"] += len(said.numbers | {str(y) for y in said.years})
        cues["addressed"] += bool(_ADDRESSED.search(sentence))
        cues["statement"] += 1
    cues["kind_cue"] += kind_of(line.text) in CUED_KINDS
    cues["caption"] += math.log1p(len(claim(line.caption).words)) if line.caption else 0.0


def _answers(lines: list[Line], i: int) -> float:
    """1.0 when the line before, another speaker's, asks a question."""
    before = lines[i - 1] if i else None
    return float(before is not None and before.speaker != lines[i].speaker and before.asks())


def _draws_reaction(lines: list[Line], i: int) -> float:
    """1.0 when the line after, another speaker's, reacts to this one."""
    after = lines[i + 1] if i + 1 < len(lines) else None
    return float(
        after is not None
        and after.speaker != lines[i].speaker
        and bool(_REACTION.search(after.text))
    )


def _read_again(line: Line, statements: list[_Statement]) -> list[_Statement]:
    """The statements `small_talk` reads of a line's text read as a line once more: the same,
    unless that unescapes or cuts a caption again."""
    again = Line.of("", line.text).text
    return statements if again == line.text else _statements(again)


def cues(lines: list[Line], known: Set[str] = frozenset()) -> list[Cues | None]:
    """Each line's cues (POINTS' keys), read in the order said, beside the lines around it and
    the content words the scope already holds (`known`); None for small talk."""
    speakers = _speaker_stems({line.speaker for line in lines})
    read = [_statements(line.text) for line in lines]
    said = [_words(statements) for statements in read]
    counts = Counter(w for words in said for w in words)
    seen = set(known)
    out: list[Cues | None] = []
    for i, line in enumerate(lines):
        found: Cues = defaultdict(float)
        found["answers"] = _answers(lines, i)
        found["reaction"] = _draws_reaction(lines, i)
        found["novel"] = len(said[i] - seen)
        found["rare"] = sum(counts[w] == 1 for w in said[i])
        seen |= said[i]
        if _small_talk(_read_again(line, read[i]), speakers):
            out.append(None)
            continue
        _statement_cues(line, read[i], speakers, found)
        out.append(found)
    return out


def scores(lines: list[Line], known: Set[str] = frozenset()) -> list[float]:
    """Each line's points (0 for small talk); see `cues`."""
    return [
        0.0 if found is None else sum(POINTS[k] * v for k, v in found.items())
        for found in cues(lines, known)
    ]
