"""Search's answer, one place per turn: a fact that is its turn's own words and the turn are one
memory.

Fused, a fact and its turn each take a place among the few results a search returns. The
offline distiller's facts are sentences of their turn: on agent traffic (a user's paragraph, an
assistant's long answer) the ten best held seven turns' worth on average. So of a fact whose
only source is a listed turn that holds its text word for word, and that turn, the one ranked
lower is left out, and the places go to other turns: the turn, ranked above, says everything
its fact says; the fact, ranked above, names its turn (`sources` returns it). A model's fact
says the turn again in its own words, and keeps its place: it is what forged made of the turn.
Facts are never left out for each other (two sentences of one turn are two memories), nor is
anything drawn from several turns (a summary, a batch's fact).
"""

from __future__ import annotations

from forged.models import MemoryItem

__all__ = ["WIDER", "one_per_turn"]

WIDER = 2  # a search reads this many times its limit, to fill the places left by repeats


def one_per_turn(items: list[MemoryItem], limit: int) -> list[MemoryItem]:
    """The first `limit` items, best first, without a fact below its own turn that holds its
    words, or such a turn below the fact."""
    turns: dict[int, str] = {}  # the turns kept, by seq: their text
    facts: dict[int, list[str]] = {}  # the texts of kept facts taken from one turn, by its seq
    out: list[MemoryItem] = []
    for item in items:
        if item.type == "interaction":
            if any(text in item.text for text in facts.get(item.id, ())):
                continue
            turns[item.id] = item.text
        elif item.type == "fact" and item.first_seq == item.last_seq:
            if item.text in turns.get(item.first_seq, ""):
                continue
            facts.setdefault(item.first_seq, []).append(item.text)
        out.append(item)
        if len(out) == limit:
            break
    return out
