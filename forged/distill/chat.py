"""Chats with an assistant: what the user says is memory; the assistant's explanations are not.

An agent's traffic is a user's message, often one long paragraph, and an assistant's answer,
often hundreds of lines of markdown. The offline distiller reads such a transcript (one where a
line's speaker is an assistant, a system or a tool, or one part of an interaction cut in
chunks) by these rules:

- the user's lines are read sentence by sentence; each sentence that states something (not a
  question, not small talk, not a request to the assistant such as "Can you…" or "Please
  write…") is kept on its own, with the kind forged.distill.kinds gives it, a short one with
  the sentences after it, a quotation whole with the sentence naming its speaker (`statements`);
- of the assistant's lines, only those that record a decision or a result ("**Result:** the
  import took 12 minutes", "Decision: …", "We migrated … in 3 hours") and the one line the user
  then accepts ("Sounds good, let's go with Backblaze" keeps the assistant's line that shares
  most words with it, two at least) are kept; headings, code, table rows, list items and the
  rest, general advice, never are.

Everything is one pass over the lines, and each acceptance reads only the answer before it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from forged.distill.salience import Line, small_talk, words_of
from forged.text.grounding import claim
from forged.text.sentences import sentences

__all__ = [
    "ASSISTANT_SPEAKERS",
    "MIN_ACCEPTED_WORDS",
    "MIN_FACT_WORDS",
    "MIN_STATED_WORDS",
    "Kept",
    "is_chat",
    "kept",
    "sentences",
    "statements",
]

ASSISTANT_SPEAKERS = frozenset({"assistant", "system", "tool"})  # roles rendered as speakers
MIN_ACCEPTED_WORDS = 2  # content words an accepted line shares with the user's acceptance
MIN_STATED_WORDS = 2  # content words and numbers a user's statement needs
MIN_FACT_WORDS = 5  # a shorter sentence is kept with the next one, context for it
_FENCE = re.compile(r"^\s*(?:```|~~~)")
_STRUCTURE = re.compile(  # a heading, a table row, a list item, a quote, a rule
    r"^\s*(?:#{1,6}\s|\||[-*+]\s|\d+[.)]\s|>|(?:-{3,}|\*{3,}|_{3,})\s*$)"
)
_REQUEST = re.compile(  # a sentence that asks the assistant for something
    r"^\W*(?:please\b|can you\b|could you\b|would you\b|will you\b|help me\b|write\b|"
    r"give me\b|show me\b|tell me\b|explain\b|make me\b|generate\b|create\b|list\b|"
    r"summari[sz]e\b|fix\b|i need you\b|i want you\b)",
    re.IGNORECASE,
)
_RECORD = re.compile(  # an assistant line that records a decision or a result
    r"^\W*(?:result|results|outcome|decision|decided|done|status|fixed|measured)\W*:"
    r"|\b(?:we|i|you) (?:decided|chose|agreed|settled on|went with|migrated|deployed|measured)\b",
    re.IGNORECASE,
)
_ACCEPTS = re.compile(  # a user's message that accepts what the assistant proposed
    r"^\W*(?:yes|yep|yeah|ok|okay|sure|agreed|perfect|great|sounds good|that works|"
    r"looks good|let's go with|let's do|go with|i'll go with|we'll go with|do it)\b",
    re.IGNORECASE,
)
_OPENS = " \t\n:([\u2014"  # what a straight quote that opens a quotation follows
# Words before a quotation that only say who speaks ("Then Gina said:"). Possessive: quotes and
# dashes are both word and not, and backtracking over each way to cut a run of them into words
# grew as a power of its length.
_ATTRIBUTION = re.compile(
    r"^\W*+(?:[\w'-]++\W++){0,3}?(?:said|says|asked|asks|replied|replies|wrote|writes|added|"
    r"answered|told me|tells me)\W*$",
    re.IGNORECASE,
)
_MARKS = re.compile(r"[*_`]+")  # emphasis and inline code marks, not part of what is said


@dataclass(frozen=True)
class Kept:
    """What to keep of one line: the line's id, the text (a sentence of it, or all of it)."""

    seq: int
    line: int
    speaker: str
    text: str
    accepted: bool = False  # an assistant's line the user accepted


def is_chat(speakers: Sequence[str], part: bool) -> bool:
    """Whether a transcript is a chat with an assistant: one of its speakers is one, or it is
    one part of a long interaction (only an agent's traffic is that long)."""
    return part or any(s in ASSISTANT_SPEAKERS for s in speakers)


def _weight(sentence: str, speakers: frozenset[str]) -> int:
    """What a user's sentence states: its content words and numbers; 0 for a question, a
    request to the assistant or small talk, which state nothing about the user's world."""
    if sentence.rstrip("\"'\u201d) ").endswith("?") or _REQUEST.search(sentence):
        return 0
    if small_talk(sentence, speakers):
        return 0
    return len(words_of(Line.of("", sentence))) + len(claim(sentence).numbers)


def statements(text: str, speakers: frozenset[str]) -> list[str]:
    """A user's line as statements: its sentences, each short one ("Yeah, it's tough.") joined
    with those after it until they hold MIN_FACT_WORDS content words and numbers; questions,
    requests and small talk left out. One kept with fewer than MIN_STATED_WORDS says nothing.
    A quotation stays whole with the sentence that opens it (`Gina said: "I opened a store.
    It sells …"`), kept or left out as one: its later sentences are the quoted speaker's, never
    the user's own; weighed by what is quoted, so quoted small talk is not kept for its
    "Gina said"."""
    out: list[str] = []
    run: list[str] = []
    held = 0
    depth = 0  # quotations open
    quotes = _quotations_close(text)  # one left open (an inch mark, a typo) is no quotation

    def close() -> None:
        nonlocal held
        if run and held >= MIN_STATED_WORDS:
            out.append(" ".join(run))
        run.clear()
        held = 0

    for sentence in sentences(text):
        quoted = depth > 0
        depth = _quoting(sentence, depth) if quotes else 0
        weight = _weight(_quoted(sentence) if quotes and not quoted else sentence, speakers)
        if quoted or depth:  # opens or goes on with a quotation: the quoted speaker's, whole
            run.append(sentence)
            held += max(weight, 0)
        elif weight <= 0:  # says nothing: a boundary
            close()
            continue
        else:
            run.append(sentence)
            held += weight
        if (held >= MIN_FACT_WORDS or quoted) and not depth:  # a quotation ends a statement
            close()
    close()
    return out


def _quoting(text: str, depth: int) -> int:
    """How many quotations are open after `text`, given how many were before it. A straight
    quote opens one at the start or after a space, a colon or a bracket, before a word; else it
    closes the last one open, if any (in `a 27" monitor` it is an inch mark). Curly quotes say
    which way they go."""
    for at, char in enumerate(text):
        if char == '"':
            depth = depth + 1 if _opens(text, at) else max(depth - 1, 0)
        elif char in "\u201c\u201d":
            depth = depth + 1 if char == "\u201c" else max(depth - 1, 0)
    return depth


def _opening(text: str) -> int | None:
    """Where the first quotation of `text` opens (as `_quoting` reads quotes), if one does."""
    for at, char in enumerate(text):
        if char == "\u201c" or (char == '"' and _opens(text, at)):
            return at
    return None


def _opens(text: str, at: int) -> bool:
    """Whether the straight quote at `at` opens a quotation: at the start or after a space, a
    colon or a bracket, before a word."""
    return (at == 0 or text[at - 1] in _OPENS) and text[at + 1 : at + 2].strip() != ""


def _quoted(sentence: str) -> str:
    """A sentence as what it states: of one that opens a quotation with words that only say who
    speaks, what is quoted (`Gina said: "See you soon!"` states no more than "See you soon!",
    small talk); any other sentence whole."""
    at = _opening(sentence)
    return sentence if at is None or not _ATTRIBUTION.match(sentence[:at]) else sentence[at + 1 :]


def _quotations_close(text: str) -> bool:
    """Whether every quotation the text opens is closed again."""
    return _quoting(text, 0) == 0


def _records(text: str) -> bool:
    """Whether an assistant's line records a decision or a result (not structure, not advice)."""
    return not _STRUCTURE.search(text) and bool(_RECORD.search(_MARKS.sub("", text)))


def _accepted(said: str, answer: list[Kept]) -> Kept | None:
    """The line of the answer before that the user's `said` accepts: the one sharing most
    content words with it, MIN_ACCEPTED_WORDS at least; None when `said` accepts nothing."""
    if not _ACCEPTS.search(said):
        return None
    words = words_of(Line.of("", said))
    best, most = None, MIN_ACCEPTED_WORDS - 1
    for line in answer:
        shared = len(words & words_of(Line.of("", _MARKS.sub("", line.text))))
        if shared > most:
            best, most = line, shared
    return None if best is None else Kept(best.seq, best.line, best.speaker, best.text, True)


def kept(lines: list[tuple[tuple[int, int], Line]]) -> list[Kept]:
    """What to keep of a chat's lines (see the module docstring), in the order said."""
    speakers = frozenset(line.speaker for _, line in lines)
    out: list[Kept] = []
    answer: list[Kept] = []  # the assistant's last answer's lines, outside code
    fenced, last = False, ""
    for (seq, n), line in lines:
        text = line.text if not line.caption else f"{line.text} [shares {line.caption}]"
        if line.speaker in ASSISTANT_SPEAKERS:
            if last not in ASSISTANT_SPEAKERS:
                answer, fenced = [], False
            if _FENCE.search(text):
                fenced = not fenced
            elif not fenced and not _STRUCTURE.search(text):
                answer.append(Kept(seq, n, line.speaker, text))
                if _records(text):
                    out.append(answer[-1])
        else:
            if last in ASSISTANT_SPEAKERS and (taken := _accepted(text, answer)):
                out.append(taken)
            out += [Kept(seq, n, line.speaker, s) for s in statements(text, speakers)]
        last = line.speaker
    return list({(k.seq, k.line, k.text): k for k in out}.values())
