"""Search's answer, one place per turn: a fact and the one turn it was taken from are one memory.

Fused, a fact and its turn each take a place among the few results a search returns: the
offline distiller's facts are sentences of the turn, a model's are what the turn says again.
On agent traffic (a user's paragraph, an assistant's long answer) the ten best held seven
turns' worth on average. So of a fact whose only source is a listed turn and that turn, the
one ranked lower is left out, and the places go to other turns: the turn, ranked above, says
everything its fact says; the fact, ranked above, names its turn (`sources` returns it).
Facts are never left out for each other (two sentences of one turn are two memories), nor is
anything drawn from several turns (a summary, a batch's fact).
"""

from __future__ import annotations

from forged.models import MemoryItem

__all__ = ["WIDER", "one_per_turn"]

WIDER = 2  # a search reads this many times its limit, to fill the places left by repeats


def one_per_turn(items: list[MemoryItem], limit: int) -> list[MemoryItem]:
    """The first `limit` items, best first, without a fact below its own turn or a turn below
    a fact taken from it alone."""
    turns: set[int] = set()  # seqs of the turns kept
    facts: set[int] = set()  # seqs of the turns that kept facts come from alone
    out: list[MemoryItem] = []
    for item in items:
        alone = item.first_seq == item.last_seq
        if item.type == "interaction":
            if item.id in facts:
                continue
            turns.add(item.id)
        elif item.type == "fact" and alone:
            if item.first_seq in turns:
                continue
            facts.add(item.first_seq)
        out.append(item)
        if len(out) == limit:
            break
    return out
