"""Passages: a turn too long for a context block, offered as the sentences the question is about.

An agent's turn (a user's paragraph and an assistant's answer of many lines of markdown) never
fits a block whole, so packing skipped every one and a block held facts alone: a sentence
each, without the sentence beside it that often holds the answer ("I visited a veteran's
hospital and met some amazing people. It made me appreciate what we have."). A turn whose
line would cost more than LONG_TURN_TOKENS (a chat's short turn stays whole) is offered as a
passage of about PASSAGE_TOKENS instead: the sentence that holds most of the question's words
(stemmed, function words left out), with those after it while they fit (an answer comes after
what it answers), then those before, marked where cut. The sentences are read from what people
said (the user's and other named speakers' messages) before an assistant's, system's or
tool's: what the user says is the memory. A block taking a passage may drop the facts it
repeats, as for a whole turn (forged.recall.packing).
"""

from __future__ import annotations

import msgspec

from forged.models import MemoryItem
from forged.recall.packing import content_words
from forged.text.grounding import stem
from forged.text.sentences import sentences
from forged.text.tokens import CHARS_PER_TOKEN, estimate_tokens

__all__ = ["CUT", "LONG_TURN_TOKENS", "PASSAGE_TOKENS", "focus", "passage"]

LONG_TURN_TOKENS = 200  # a turn costing more (half a usual block) is offered as a passage
PASSAGE_TOKENS = 100  # what a passage costs at most, about: a few sentences
CUT = "\u2026"  # HORIZONTAL ELLIPSIS: where a passage leaves out the turn's other words
_ROLES = frozenset({"assistant", "system", "tool"})  # speakers who are no person: read last


def _messages(item: MemoryItem) -> list[tuple[str, str]]:
    """The turn's messages as (speaker, text), from its "speaker: text" lines: a line that
    starts with one of its speakers starts a message, any other continues the last. One pass:
    each line is looked at once, each message joined once."""
    speakers = frozenset(s for s in (item.speaker or "").split(", ") if s)
    out: list[tuple[str, list[str]]] = []
    for line in item.text.split("\n"):
        who, colon, said = line.partition(": ")
        if colon and who in speakers:
            out.append((who, [said]))
        elif out:
            out[-1][1].append(line)
        else:
            out.append(("", [line]))
    return [(who, "\n".join(lines)) for who, lines in out]


def _held(sentence: str, wanted: set[str]) -> int:
    return len({stem(w) for w in content_words(sentence)} & wanted)


def _window(said: list[str], best: int, room: int) -> tuple[int, int]:
    """The sentences from `best` on (start, end) that fit in `room` characters, then those
    before it while they still fit: what answers a sentence is said after it."""
    start, end, used = best, best + 1, len(said[best])
    while end < len(said) and used + 1 + len(said[end]) <= room:
        used, end = used + 1 + len(said[end]), end + 1
    while start > 0 and used + 1 + len(said[start - 1]) <= room:
        used, start = used + 1 + len(said[start - 1]), start - 1
    return start, end


def _focused(item: MemoryItem, question: str) -> tuple[str, list[str], int, bool] | None:
    """Of a turn: the speaker and sentences of the message holding the sentence with most of
    the question's words, that sentence's place, and whether the turn has other messages."""
    wanted = {stem(w) for w in content_words(question)}
    messages = _messages(item)
    people = [m for m in messages if m[0] not in _ROLES] or messages
    said = [(who, sentences(" ".join(text.split()))) for who, text in people]
    places = [(m, n) for m, (_, cut) in enumerate(said) for n in range(len(cut))]
    if not places:
        return None
    m, best = max(places, key=lambda p: (_held(said[p[0]][1][p[1]], wanted), -p[0], -p[1]))
    return *said[m], best, len(messages) > 1


def focus(item: MemoryItem, question: str) -> str:
    """What an item says that the question is about: a turn's sentence holding most of the
    question's words; a fact's or summary's text."""
    focused = _focused(item, question) if item.type == "interaction" else None
    return item.text if focused is None else focused[1][focused[2]]


def passage(item: MemoryItem, question: str) -> MemoryItem:
    """The turn as its passage for the question when it is too long for a block (see the
    module docstring); any other item as it is."""
    if item.type != "interaction" or estimate_tokens(item.text) <= LONG_TURN_TOKENS:
        return item
    focused = _focused(item, question)
    if focused is None:
        return item
    who, cut, best, others = focused
    room = PASSAGE_TOKENS * CHARS_PER_TOKEN
    start, end = _window(cut, best, room)
    text = " ".join(cut[start:end])
    if len(text) > room:  # one sentence longer than a passage: its head, at a word
        text, end = text[:room].rsplit(" ", 1)[0], best
    head = CUT + " " if start > 0 else ""
    tail = " " + CUT if end < len(cut) or others else ""
    return msgspec.structs.replace(item, text=f"{who}: {head}{text}{tail}" if who else text)
