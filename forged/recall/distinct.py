"""Search's answer, one place per turn: a fact that is its turn's own words and the turn are one
memory.

Fused, a fact and its turn each take a place among the few results a search returns. The
offline distiller's facts are sentences of their turn, each as "speaker: sentence": on agent
traffic (a user's paragraph, an assistant's long answer) the ten best held seven turns' worth on
average. So of a fact whose only source is a listed turn that holds its words word for word
(the sentence anywhere in the speaker's message, not only at its start), and that turn, the one
ranked lower is left out, and the places go to other turns: the turn, ranked above, says
everything its fact says; the fact, ranked above, names its turn (`sources` returns it). A
model's fact says the turn again in its own words, and keeps its place: it is what forged made
of the turn. Facts are never left out for each other (two sentences of one turn are two
memories), nor is anything drawn from several turns (a summary, a batch's fact).
"""

from __future__ import annotations

from forged.models import MemoryItem
from forged.recall.fusion import plain

__all__ = ["WIDER", "one_per_turn", "said_in"]

WIDER = 2  # a search reads this many times its limit, to fill the places left by repeats
SPEAKER_MARK = ": "  # between a line's speaker and what they said, in turns and kept lines


def said_in(fact: str, turn: str) -> bool:
    """Whether a fact's text is its turn's own words: in the turn's text as it stands, or, for a
    line kept as "speaker: sentence", the sentence in the turn and the speaker one of its own
    (both with whitespace collapsed: `plain`)."""
    return _said_in(plain(fact), plain(turn))


def _said_in(fact: str, turn: str) -> bool:
    """`said_in` of texts already collapsed (a turn of megabytes is collapsed once, not once
    for each of its facts listed)."""
    if fact in turn:
        return True
    who, mark, sentence = fact.partition(SPEAKER_MARK)
    if not mark or not sentence.strip():
        return False
    speaks = turn.startswith(who + SPEAKER_MARK) or f" {who}{SPEAKER_MARK}" in turn
    return speaks and sentence in turn


def one_per_turn(items: list[MemoryItem], limit: int) -> list[MemoryItem]:
    """The first `limit` items, best first, without a fact below its own turn that holds its
    words, or such a turn below the fact (each text collapsed once: `plain`)."""
    turns: dict[int, str] = {}  # the turns kept, by seq: their text, collapsed
    facts: dict[int, list[str]] = {}  # the texts of kept facts taken from one turn, by its seq
    out: list[MemoryItem] = []
    for item in items:
        if item.type == "interaction":
            said = plain(item.text)
            if any(_said_in(text, said) for text in facts.get(item.id, ())):
                continue
            turns[item.id] = said
        elif item.type == "fact" and item.first_seq == item.last_seq:
            fact = plain(item.text)
            if item.first_seq in turns and _said_in(fact, turns[item.first_seq]):
                continue
            facts.setdefault(item.first_seq, []).append(fact)
        out.append(item)
        if len(out) == limit:
            break
    return out
