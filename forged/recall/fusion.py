"""Fusion: one ranking from the best items of each memory type (facts, summaries, turns)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection

import msgspec

from forged.models import MemoryItem, MemoryType
from forged.recall.packing import FIRST_KEPT, content_words
from forged.recall.periods import Period, within
from forged.text.grounding import stem
from forged.text.sentences import sentences

__all__ = [
    "COVERAGE_WEIGHT",
    "COVERED",
    "FUSION_TIES",
    "FUSION_WEIGHT",
    "RRF_K",
    "SHARE_CHARS",
    "SHARE_FROM",
    "WHEN_BOOST",
    "WORDS_LEAST",
    "by_coverage",
    "covered_first",
    "fuse",
    "fused_top",
    "hybrid",
    "plain",
]

RRF_K = 60  # reciprocal rank fusion: an item scores weight / (RRF_K + its rank in its list)
FUSION_WEIGHT: dict[str, float] = {"fact": 1.0, "summary": 0.5, "interaction": 1.0}
FUSION_TIES = ("interaction", "fact", "summary")  # which goes first on equal fused scores
WHEN_BOOST = 1.5  # fused score multiplier of an item dated within a time the query names
COVERAGE_WEIGHT = 1.0  # a block's candidate scores (1 + this x the share of the query it holds)
WORDS_LEAST = 0.3  # the words' least share of a fused score by words and meaning (`hybrid`)
SHARE_FROM = 3  # the best items by words whose hold on the query sets the words' share
SHARE_CHARS = 4096  # of each, the start whose sentences are read: a user's message, bounded
COVERED = 20  # a fused answer's first items, reordered by coverage (`covered_first`)


def fuse(
    lists: list[list[MemoryItem]], limit: int, when: list[Period] | None = None
) -> list[MemoryItem]:
    """One ranking from one list per type, by weighted reciprocal rank fusion.

    An item scores FUSION_WEIGHT[type] / (RRF_K + its rank in its own list): BM25 scores of
    different indexes are not comparable, ranks are. Facts and interactions alternate; a summary,
    long and broad, weighs half and so comes after the facts and turns of about twice its rank.
    An item dated within a time the query names (`when`: "in June", "on 13 October 2023") scores
    WHEN_BOOST times more: full-text search cannot match a date against the day an item is about.
    On equal scores an interaction goes first (FUSION_TIES), so a fact that only repeats it is
    then dropped by the packing's novelty rule rather than the turn. A fact whose text is a
    listed turn's, word for word (a one-line turn an extractive distiller kept), is that turn
    and is left out: counted twice, a line ranked high in a short list of picked lines would
    stand above better turns.
    """
    said = {i.id: plain(i.text) for found in lists for i in found if i.type == "interaction"}
    scored = [
        msgspec.structs.replace(item, score=_fused_score(item, rank, when))
        for found in lists
        for rank, item in enumerate(found, start=1)
        if not _is_turn(item, said)
    ]
    scored.sort(key=lambda i: (-i.score, FUSION_TIES.index(i.type)))
    return scored[:limit]


def _words_share(lexical: list[MemoryItem], query: str) -> float:
    """How much a fused score owes to the words: WORDS_LEAST when no sentence of the best few
    by words holds any of the query's content words, all of it when one sentence holds them all
    (`hybrid`). A sentence, not the item: an agent's exchange (a user's paragraph, a long
    answer) holds most words of any question somewhere, and meaning then never counted."""
    wanted = _stems(query)
    if not wanted:
        return WORDS_LEAST
    starts = (i.text[:SHARE_CHARS] for i in lexical[:SHARE_FROM])
    held = max((_held(s, wanted) for text in starts for s in sentences(text)), default=0.0)
    return WORDS_LEAST + (1 - WORDS_LEAST) * held


def _scaled(items: list[MemoryItem], least: float) -> dict[int, float]:
    """Each item's score scaled into [0, 1] over its list: (score - least) / (best - least)."""
    span = max(i.score for i in items) - least
    return {i.id: (i.score - least) / span if span > 0 else 1.0 for i in items}


def hybrid(lexical: list[MemoryItem], dense: list[MemoryItem], query: str) -> list[MemoryItem]:
    """One type's list by words and its list by meaning, as one, by a convex combination.

    An item scores share x its score by words over the list's best (BM25 x recency; 0 when
    not listed) + (1 - share) x its cosine scaled between the list's least and best (0 when
    not listed). The share is what the words earned (`_words_share`): when the best turns by
    words hold most of the question's words, words decide and meaning breaks their ties; when
    they hold few (a question in other words, or in another language: "where does my sister
    work?" shares no word with 我妹妹在杭州当护士), meaning decides. Ranks would not tell
    these apart: fused by reciprocal rank, the one true match found only by meaning fell below
    every turn that merely shared a word with the question.
    Without a list by meaning (no vectors yet, no model) the list by words is the answer.
    """
    if not dense:
        return lexical
    share = _words_share(lexical, query)
    words = _scaled(lexical, 0.0) if lexical else {}
    meant = _scaled(dense, min(i.score for i in dense))
    items = {i.id: i for i in dense} | {i.id: i for i in lexical}
    score = {key: share * words.get(key, 0.0) + (1 - share) * meant.get(key, 0.0) for key in items}
    best = sorted(score, key=lambda key: -score[key])[: max(len(lexical), len(dense))]
    return [msgspec.structs.replace(items[key], score=score[key]) for key in best]


def plain(text: str) -> str:
    """The text with its whitespace collapsed: how a kept line is compared with its turn."""
    return " ".join(text.split())


def _is_turn(item: MemoryItem, said: dict[int, str]) -> bool:
    """Whether a fact is, word for word, the one turn it comes from (`said`: turns' texts)."""
    return (
        item.type == "fact"
        and item.first_seq == item.last_seq
        and said.get(item.first_seq) == plain(item.text)
    )


def _fused_score(item: MemoryItem, rank: int, when: list[Period] | None) -> float:
    score = FUSION_WEIGHT[item.type] / (RRF_K + rank)
    return score * WHEN_BOOST if when and within(item.first_at, item.last_at, when) else score


def _most_fused(table: MemoryType, rank: int, when: list[Period] | None) -> float:
    """The most `_fused_score` can give an item of this type at this rank: keep them together."""
    return FUSION_WEIGHT[table] / (RRF_K + rank) * (WHEN_BOOST if when else 1.0)


def _depths(types: list[MemoryType], limit: int) -> dict[MemoryType, int]:
    """How deep each list must be read for the fused top `limit` when every list is long: the
    ranks of each type whose fused score is among the `limit` best (a summary, weighing half,
    needs a list of facts or turns to run short before it can enter)."""
    best = heapq.nlargest(
        limit, ((_most_fused(t, r, None), t) for t in types for r in range(1, limit + 1))
    )
    return {t: sum(1 for _, u in best if u == t) for t in types}


def fused_top(
    rank: Callable[[MemoryType, int], list[MemoryItem]],
    types: list[MemoryType],
    limit: int,
    when: list[Period] | None = None,
    said: Callable[[list[int]], dict[int, str]] = lambda seqs: {},
) -> list[MemoryItem]:
    """`fuse` of each type's best `limit` (`rank(type, depth)` gives its best `depth`), reading
    each list only as deep as the fused top can reach (`said(seqs)`: those turns' plain text).

    A fused score is bounded by the rank alone, so the lists are first read to `_depths`; one
    that has more is read in full only when an item below what was read could still score
    above the last one kept (a list ran short, or the query names a time), or when a fact in
    the top may be a turn not yet read. The answer is the same as reading every list to
    `limit`; behind full lists of facts and turns, the summaries' index is not searched.
    """
    depth = dict.fromkeys(types, limit) if when else _depths(types, limit)
    lists = {t: rank(t, depth[t]) if depth[t] else [] for t in types}
    while True:
        found = fuse(list(lists.values()), limit, when)
        cut = found[-1].score if len(found) == limit else 0.0
        deeper = [
            t
            for t in types
            if len(lists[t]) == depth[t] < limit and _most_fused(t, depth[t] + 1, when) >= cut
        ]
        turns = "interaction"
        if (
            turns in depth
            and turns not in deeper
            and len(lists[turns]) == depth[turns] < limit
            and _may_be_unread_turns(found, lists[turns], said)
        ):
            deeper.append(turns)  # `fuse` drops a fact that is a listed turn: list it if it is
        if not deeper:
            return found
        for t in deeper:
            depth[t] = limit
            lists[t] = rank(t, limit)


def _may_be_unread_turns(
    found: list[MemoryItem], turns: list[MemoryItem], said: Callable[[list[int]], dict[int, str]]
) -> bool:
    """Whether a fact of `found` is word for word a turn not among `turns` (`fuse` leaves such
    a fact out once its turn is listed)."""
    read = {t.id for t in turns}
    facts = [
        i
        for i in found
        if i.type == "fact" and i.first_seq == i.last_seq and i.first_seq not in read
    ]
    if not facts:
        return False
    texts = said([f.first_seq for f in facts])
    return any(_is_turn(f, texts) for f in facts)


def by_coverage(items: list[MemoryItem], query: str) -> list[MemoryItem]:
    """The items best first by fused score times 1 + COVERAGE_WEIGHT x the share of the query's
    content words (stemmed) each holds: what a context block takes its candidates in.

    Fusion sees only each list's order: a fact at the top of its list for one word of a
    question (the name of the person it is about) stands level with a turn at the top of
    its list for all the others. Fused first, the candidates are only reordered.
    """
    wanted = _stems(query)
    if not wanted:
        return items
    scored = [
        msgspec.structs.replace(i, score=i.score * (1 + COVERAGE_WEIGHT * _held(i.text, wanted)))
        for i in items
    ]
    return sorted(scored, key=lambda i: -i.score)  # stable: ties keep the fused order


def covered_first(
    items: list[MemoryItem], query: str, placed: Collection[int] = ()
) -> list[MemoryItem]:
    """Search's fused answer with its places FIRST_KEPT to COVERED in `by_coverage`'s order.
    Fused by rank alone, a fact holding one word of the question (a name) stood level with a
    turn holding all of them, and took a place among the ten best. The first few stay as
    fused, so that a context block, which weighs its own candidates (on the passages it packs)
    and holds search's first few (packing.kept_first), still holds these; so does a turn of
    `placed` (their seqs: those the neighbour rule put after the turn they answer, sharing no
    word with the question to hold a place by). Only the first twenty are weighed: reading a
    hundred long turns' words costs as much as the rest of a search."""

    def stays(n: int, item: MemoryItem) -> bool:
        return n < FIRST_KEPT or (item.type == "interaction" and item.id in placed)

    head = items[:COVERED]
    moved = iter(by_coverage([i for n, i in enumerate(head) if not stays(n, i)], query))
    return [i if stays(n, i) else next(moved) for n, i in enumerate(head)] + items[COVERED:]


def _held(text: str, wanted: set[str]) -> float:
    """The share of the query's content stems (`wanted`) the text holds. A stem of two letters
    or more begins as its word does: only the words that begin as a wanted stem are stemmed (a
    hundred candidates hold thousands of words)."""
    words = content_words(text)
    if min(map(len, wanted)) >= 2:
        starts = {s[:2] for s in wanted}
        words = {w for w in words if w[:2] in starts}
    return len({stem(w) for w in words} & wanted) / len(wanted)


def _stems(text: str) -> set[str]:
    return {stem(w) for w in content_words(text)}
