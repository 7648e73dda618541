"""Full-text ranking of one table on SQLite: FTS5's BM25 times recency decay, the exact
ranking at any scale, reading only the matches that can enter it."""

from __future__ import annotations

import functools
import heapq
import json
import math
import sqlite3
from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import Any

import msgspec

from forged.models import MemoryItem, MemoryType, Message, speaker_lines
from forged.recall.passages import CUT
from forged.recall.query import ALIAS, SearchQuery, conditions, fts_query, searched
from forged.store.sqlite_schema import BLOCK_BITS
from forged.timestamps import julian_day

__all__ = [
    "BM25_K1",
    "COUNTS_KEPT",
    "DEEPER",
    "FIRST_CANDIDATES",
    "FIRST_DEPTH",
    "PRUNED_SHARE",
    "RARE_SHARE",
    "RECENCY_FLOOR",
    "RECOUNT_SHARE",
    "SCORE",
    "SELECTIVE_MIN_ROWS",
    "STREAMED_MIN_ROWS",
    "day_decay",
    "fact_items",
    "item_rows",
    "items",
    "memory_item",
    "ranked",
    "recency_decay",
    "scope_token",
    "shown_turn",
    "turn_text",
]

SELECTIVE_MIN_ROWS = 1000  # below this many rows every word of a query makes a row match
STREAMED_MIN_ROWS = 20_000  # below this many rows a search scores every match of the scope
RECOUNT_SHARE = 0.1  # a word's share of a table is counted again once the table grew this much
COUNTS_KEPT = 4096  # phrases whose count of rows is remembered (then forgotten all at once)
BM25_K1 = 1.2  # FTS5's bm25() term-frequency saturation: a phrase adds under IDF * (k1 + 1)
RARE_SHARE = 0.5  # a phrase weighing less than this share of the query's heaviest is common
RECENCY_FLOOR = 0.5  # the least share of its score an item keeps however old it is
# Characters of one message a recalled turn holds, and of all of them: recall weighs, compares
# and packs its items' text at every search (twenty turns of 14 MB took a reader 18 s and made
# a 270 MB answer). The log keeps every turn whole (GET /v1/interactions).
SHOWN_MESSAGE_CHARS = 16_000
SHOWN_TURN_CHARS = 64_000
# What scoring a match costs against stepping over one row of a scope's token in FTS5 (about
# 7 µs and 0.08 µs, measured): a scope's token in a query makes bm25() count every row of the
# scope for its weight, however few rows the words match.
SCORE_TO_SCAN = 100

# Recency: the score halves with each half-life since it happened, down to RECENCY_FLOOR of
# it, so that what is recent wins among equals and what is old but relevant is still found.
_DECAY = "(:floor + (1 - :floor) * pow(0.5, max(0.0, :now - julianday({at})) / :half_life))"
SCORE = 11  # where the score sits in the row memory_item reads, after _COLUMNS
_COLUMNS = {  # an item's row, in the order memory_item reads it
    "fact": "f.id, f.kind, f.scope, f.session, f.text, f.created_at, f.last_seen_at, f.first_seq,"
    " f.last_seq, f.first_at, f.last_at",
    "summary": "s.id, 'summary', s.scope, s.session, s.text, s.created_at, s.created_at,"
    " s.first_seq, s.last_seq, s.first_at, s.last_at",
    "interaction": "i.seq, 'interaction', i.scope, i.session, i.messages, i.received_at,"
    " i.received_at, i.seq, i.seq, i.timestamp, i.timestamp",
}
_LATER = {  # what memory_item reads after the score: what retired the item, and when
    "fact": "f.superseded_by, f.invalid_at",
    "summary": "s.condensed_into, NULL",
    "interaction": "NULL, NULL",
}
# The winners' rows, a place held for the score they were ranked by.
_ROWS = """
    SELECT {columns}, NULL, {later} FROM {table} AS {alias}
    WHERE {alias}.{key} IN (SELECT value FROM json_each(:ids))
"""
# Every match of the scope scored and joined to its row in one statement: for a small table,
# fewer round trips than reading matches best first. CROSS JOIN: the index drives.
_SCORED = """
    SELECT {columns}, -bm25({fts}, 1.0, 0.0) * {decay}, {later}
    FROM {fts} CROSS JOIN {table} AS {alias} ON {alias}.{key} = {fts}.rowid
    WHERE {fts} MATCH :match AND {alias}.scope = :scope {filters}
    ORDER BY 12 DESC, 1 DESC LIMIT :limit
"""
# The candidates the index found that pass the filters (SQL's), with when they happened: only
# the key and a timestamp per candidate, so that reading many costs little (`recency_decay` gives
# the decay _DECAY would, four times faster than SQLite's julianday() and pow()).
# `+` keeps the scope's index out: looking each key up in it costs several times the lookup by key.
_TIMES = """
    SELECT {alias}.{key}, {alias}.{at} FROM {table} AS {alias}
    WHERE {alias}.{key} IN (SELECT value FROM json_each(:ids)) AND +{alias}.scope = :scope {filters}
"""
_KEY_AND_TIME: dict[MemoryType, tuple[str, str]] = {
    "fact": ("id", "last_at"),
    "summary": ("id", "last_at"),
    "interaction": ("seq", "timestamp"),
}
# The index's best matches by their bound: BM25 ('rank' is BM25 over the text column) times
# the largest decay the match can have, 1 but for turns (their block's, schema.BLOCK_BITS).
# SQLite keeps the best `depth` in a bounded sorter as FTS5 scores them: no more reach Python.
# A fact's or a summary's decay has no bound below 1: the best few by BM25 would rarely be
# enough, and all their matches are read (unordered: a sort in Python costs less).
_ALL = "SELECT rowid, -rank AS bm25, -rank AS bound FROM {fts} WHERE {fts} MATCH :match"
_TOP_TURNS = f"""
    WITH ceilings (block, decay) AS MATERIALIZED (
        SELECT block, {_DECAY.format(at="latest")} FROM interaction_blocks
    )
    SELECT f.rowid, -f.rank AS bm25, -f.rank * coalesce(c.decay, 1.0) AS bound
    FROM interactions_fts AS f LEFT JOIN ceilings AS c ON c.block = f.rowid >> {BLOCK_BITS}
    WHERE interactions_fts MATCH :match ORDER BY bound DESC LIMIT :depth
"""
# Best bound first, about 1.1 to 1.9 matches per result reach the last result's score
# (LoCoMo-sized and 300,000-turn scopes): so many are sorted and looked up at first.
FIRST_CANDIDATES = 32  # matches looked up at first beyond one per result; then twice as many
FIRST_DEPTH = 3  # matches sorted at first per result, beyond FIRST_CANDIDATES
DEEPER = 4  # a deeper read of the index asks for this many times as many
PRUNED_SHARE = 0.25  # rare phrases' rows under this share of the common ones': try _pruned
_FTS: dict[MemoryType, str] = {
    "fact": "facts_fts",
    "summary": "summaries_fts",
    "interaction": "interactions_fts",
}
_CONTENT: dict[MemoryType, str] = {
    "fact": "facts",
    "summary": "summaries",
    "interaction": "interactions",
}
_SPAN_COLUMNS: dict[MemoryType, tuple[str, str]] = {  # what since and until compare with
    "fact": ("f.first_at", "f.last_at"),
    "summary": ("s.first_at", "s.last_at"),
    "interaction": ("i.timestamp", "i.timestamp"),
}
_MESSAGES = msgspec.json.Decoder(list[Message])
# (database file, index, phrase) -> (rows then, rows holding the phrase, state then): _Counts
_COUNTED: dict[tuple[str, str, str], tuple[int, int, tuple[Any, ...]]] = {}
_GIVEN = "SELECT seq FROM sqlite_sequence WHERE name = ?"  # a table's last AUTOINCREMENT key
_AVERAGES = "SELECT block FROM {fts}_data WHERE id = 1"  # FTS5's counts of rows and tokens


class _Counts:
    """One table's bound on its row count and how many of its rows hold each phrase.

    Counting is a pass over the phrase's postings, so a count is kept for the next queries of
    the same database: as an estimate while the table stays within RECOUNT_SHARE of the size
    it had then, as the exact count while its index is as it was (`state`).
    """

    def __init__(self, conn: sqlite3.Connection, table: MemoryType) -> None:
        key = _KEY_AND_TIME[table][0]  # keys start at 1 and are never reused: max >= count
        sql = f"SELECT coalesce(max({key}), 0) FROM {_CONTENT[table]}"
        self.conn, self.fts, self.rows = conn, _FTS[table], int(conn.execute(sql).fetchone()[0])
        self.content = _CONTENT[table]

    @functools.cached_property
    def state(self) -> tuple[Any, ...]:
        """What changes whenever a row of the index is added, removed or rewritten: the last
        key the table gave (never reused) and FTS5's record of its rows and tokens."""
        given = self.conn.execute(_GIVEN, (self.content,)).fetchone()
        return given, self.conn.execute(_AVERAGES.format(fts=self.fts)).fetchone()

    @functools.cached_property
    def database(self) -> str:
        """The database file, which the kept counts are of ("" in memory: none kept)."""
        return str(self.conn.execute("PRAGMA database_list").fetchone()[2])

    def documents(self, phrase: str, *, fresh: bool = False, column: str = "text") -> int:
        """The rows holding a phrase in a column, counted up to just over half (a scope's token
        to the end); `fresh`: as they are now."""
        rows, key = self.rows, (self.database, self.fts, f"{column} : {phrase}")
        known = _COUNTED.get(key) if self.database else None
        if known and (
            known[2] == self.state if fresh else abs(rows - known[0]) <= RECOUNT_SHARE * known[0]
        ):
            return known[1]
        count = f"SELECT count(*) FROM (SELECT 1 FROM {self.fts} WHERE {self.fts} MATCH ? LIMIT ?)"
        most = rows + 1 if column == "scope" else rows // 2 + 1
        (documents,) = self.conn.execute(count, (key[2], most)).fetchone()
        if len(_COUNTED) >= COUNTS_KEPT:
            _COUNTED.clear()
        _COUNTED[key] = (rows, int(documents), self.state)
        return int(documents)

    def weight(self, phrase: str, *, fresh: bool = False) -> float:
        """FTS5's bm25() IDF of a phrase; with a `fresh` count, never below the true one
        (more rows, more weight, and `rows` bounds the row count from above)."""
        documents = self.documents(phrase, fresh=fresh)
        return max(1e-6, math.log((self.rows - documents + 0.5) / (documents + 0.5)))


def _selective(counts: _Counts, phrases: list[str]) -> list[str]:
    """Drop the phrases found in more than half the rows of a large table, unless all are.

    BM25 gives such a word no weight (FTS5 clamps its IDF to almost zero), yet in an OR query
    it makes nearly every row a match whose score must be computed: "the" or "was" in a
    question would cost a pass over the whole index.
    """
    if counts.rows < SELECTIVE_MIN_ROWS:
        return phrases
    kept = [p for p in phrases if counts.documents(p) <= counts.rows // 2]
    return kept or phrases


def _ceiling(counts: _Counts, phrases: list[str], *, fresh: bool = False) -> float:
    """More than the BM25 of any row that holds no phrase but these (with `fresh` counts):
    FTS5's bm25() gives a phrase less than its weight times (BM25_K1 + 1)."""
    return (BM25_K1 + 1) * sum(counts.weight(p, fresh=fresh) for p in phrases)


def _split(counts: _Counts, phrases: list[str]) -> tuple[list[str], list[str]]:
    """The phrases weighing at least RARE_SHARE of the heaviest one, and the others."""
    weight = {p: counts.weight(p) for p in phrases}
    heaviest = max(weight.values())
    rare = [p for p in phrases if weight[p] >= RARE_SHARE * heaviest]
    return rare, [p for p in phrases if weight[p] < RARE_SHARE * heaviest]


def _documents(counts: _Counts, phrases: list[str]) -> int:
    """How many rows hold the phrases, counting a row once per phrase (as last counted)."""
    return sum(counts.documents(p) for p in phrases)


def scope_token(scope: str) -> str:
    """The token that stands for a scope in the full-text indexes (schema.SCOPE_TOKEN)."""
    return f"s{scope.encode().hex()}0"


def _scoped_match(scope: str, phrases: list[str]) -> str:
    """The FTS5 query for any of the phrases in the text of one scope's rows."""
    return f'scope : "{scope_token(scope)}" AND text : ({fts_query(phrases)})'


def _matching(counts: _Counts, scope: str, phrases: list[str]) -> Callable[[list[str]], str]:
    """How to ask the index for rows holding phrases: in the scope's rows (its token in the
    query), or in every row, the other scopes' left to the filters, when scoring the other
    scopes' matches costs less than bm25() counting the scope's rows for its token's weight.
    One scope holding most of a large table is the second case."""
    scoped = f'"{scope_token(scope)}"'
    in_scope = counts.documents(scoped, column="scope")
    matches = _documents(counts, phrases)
    elsewhere = matches * (counts.rows - in_scope) / max(1, counts.rows)
    if elsewhere * SCORE_TO_SCAN < in_scope:
        return lambda words: f"text : ({fts_query(words)})"
    return lambda words: _scoped_match(scope, words)


def _decayed(
    conn: sqlite3.Connection,
    sql: str,
    params: dict[str, Any],
    keys: Iterable[int],
    read: dict[int, float | None],
) -> dict[int, float]:
    """The recency decay of each candidate that passes the query's filters (`sql`: _TIMES);
    `read` keeps what was read (None: filtered out), so that no candidate is looked up twice."""
    keys = list(keys)
    if unread := [key for key in keys if key not in read]:
        params["ids"] = json.dumps(unread)
        now, half_life = params["now"], params["half_life"]
        found = {key: recency_decay(at, now, half_life) for key, at in conn.execute(sql, params)}
        read |= dict.fromkeys(unread) | found
    return {key: d for key in keys if (d := read[key]) is not None}


def recency_decay(at: str, now: float, half_life: float) -> float:
    """_DECAY of a timestamp, bit for bit: the same operations on the same doubles. Text that
    is no timestamp (forged writes none) decays to the floor: it cannot pass for recent."""
    try:
        day = julian_day(at)
    except ValueError:
        return RECENCY_FLOOR
    return day_decay(day, now, half_life)


def day_decay(day: float, now: float, half_life: float) -> float:
    """_DECAY of a moment given as a Julian day."""
    age = max(0.0, now - day)
    return RECENCY_FLOOR + (1 - RECENCY_FLOOR) * math.pow(0.5, age / half_life)


def _best(bm25: dict[int, float], decay: dict[int, float], limit: int) -> list[tuple[float, int]]:
    """The `limit` best candidates by BM25 times decay, as (score, key)."""
    return heapq.nlargest(limit, ((bm25[key] * d, key) for key, d in decay.items()))


def ranked(
    conn: sqlite3.Connection,
    table: MemoryType,
    query: SearchQuery,
    half_life: float,
    now: float,
) -> list[MemoryItem]:
    """One table's best matches, by BM25 times the decay of when they happened.

    The index gives the scope's matches by BM25 alone (for many, only the best few hundred per
    result); their decays are read best bound first, a few at a time, and the reading stops
    once the results are better than the bound of the next match: BM25 times the largest decay
    it can have (its block's, for a turn; else 1). Nothing after it can enter. Only the
    winners' rows are read in full. The answer is the exact ranking. A table under
    STREAMED_MIN_ROWS rows has too few matches for this to pay: one statement scores them all.
    """
    phrases = searched(query)
    if not phrases:
        return []
    counts = _Counts(conn, table)
    phrases = _selective(counts, phrases)
    params: dict[str, Any] = {
        "scope": query.scope,
        "now": now,
        "half_life": half_life,
        "floor": RECENCY_FLOOR,
    }
    filters = conditions(table, query, params)
    if counts.rows < STREAMED_MIN_ROWS:
        return _small(conn, table, query, phrases, params, filters)
    decays = _TIMES.format(filters=filters, **_names(table))
    rare, common = _split(counts, phrases)
    read: dict[int, float | None] = {}  # the decays looked up: see _decayed
    match = _matching(counts, query.scope, phrases)
    best = None
    if common and _documents(counts, rare) <= PRUNED_SHARE * _documents(counts, common):
        best = _pruned(conn, counts, query, decays, params, rare, common, read, match)
    if best is None:
        best = _streamed(conn, table, query, decays, params, match(phrases), read)
    return items(conn, table, best, params)


def _streamed(
    conn: sqlite3.Connection,
    table: MemoryType,
    query: SearchQuery,
    decays: str,
    params: dict[str, Any],
    match: str,
    read: dict[int, float | None],
) -> list[tuple[float, int]]:
    """The best of all matches (`match`: the FTS5 query), read best bound first until nothing
    left can enter; for turns, the index is asked again, DEEPER, when that is below the best
    `depth` it gave."""
    if table != "interaction":
        matches = conn.execute(_ALL.format(fts=_FTS[table]), {"match": match}).fetchall()
        matches.sort(key=itemgetter(2), reverse=True)
        return _best_of(conn, query, decays, params, matches, read)
    depth = FIRST_DEPTH * query.limit + FIRST_CANDIDATES
    while True:
        matches = conn.execute(_TOP_TURNS, params | {"match": match, "depth": depth}).fetchall()
        best = _best_of(conn, query, decays, params, matches, read)
        if len(matches) < depth or (len(best) == query.limit and best[-1][0] > matches[-1][2]):
            return best  # every match not read is bounded by the last one's bound
        depth *= DEEPER


def _best_of(
    conn: sqlite3.Connection,
    query: SearchQuery,
    decays: str,
    params: dict[str, Any],
    matches: list[tuple[int, float, float]],
    read: dict[int, float | None],
) -> list[tuple[float, int]]:
    """The best of `matches` (key, BM25, bound; best bound first), their decays read a few at
    a time until no bound left reaches the last result."""
    best: list[tuple[float, int]] = []
    start, size = 0, query.limit + FIRST_CANDIDATES
    while batch := matches[start : start + size]:
        if len(best) == query.limit:  # a match bounded under the last result cannot enter
            batch = [m for m in batch if m[2] >= best[-1][0]]  # best first: a prefix
            if not batch:
                break
        bm25 = {key: score for key, score, _ in batch}
        scored = _best(bm25, _decayed(conn, decays, params, bm25, read), query.limit)
        best = heapq.nlargest(query.limit, best + scored)
        start, size = start + size, size * 2
    return best


def _pruned(
    conn: sqlite3.Connection,
    counts: _Counts,
    query: SearchQuery,
    decays: str,
    params: dict[str, Any],
    rare: list[str],
    common: list[str],
    read: dict[int, float | None],
    match: Callable[[list[str]], str],
) -> list[tuple[float, int]] | None:
    """The best of the matches that hold a rare phrase, if no row holding only common ones can
    beat them (their BM25 stays under `_ceiling`); else None.

    A word common in the scope ("report" in every note of a team) makes every row of it a
    match whose BM25 must be computed; a rare word of the same query finds far fewer. The rare
    rows' BM25 without the common phrases is exact for those that hold none; all are scored
    again with them when that is likely to lift the results above the ceiling (a guess that
    only spares work: the answer is held to the ceiling of fresh counts).
    """
    scores = f"SELECT rowid, -rank FROM {counts.fts} WHERE {counts.fts} MATCH ?"
    with_rare = match(rare)
    bm25 = dict(conn.execute(scores, (with_rare,)))  # exact where no common phrase is held too
    decay = _decayed(conn, decays, params, bm25, read)
    if len(decay) < query.limit:
        return None
    ceiling = _ceiling(counts, common)  # as last counted: to give up early, not to decide
    both = f"{with_rare} AND text : ({fts_query(common)})"
    best = _best(bm25, decay, query.limit)  # each at most its score: a bound from below
    if best[-1][0] <= ceiling:  # the rows that hold a common phrase too might still lift it
        held = {
            key
            for (key,) in conn.execute(
                f"SELECT rowid FROM {counts.fts} WHERE {counts.fts} MATCH ?", (both,)
            )
        }
        usual = ceiling / (BM25_K1 + 1)  # what the common phrases add to a row of usual length
        likely = heapq.nlargest(
            query.limit, ((bm25[k] + usual * (k in held)) * d for k, d in decay.items())
        )
        if likely[-1] <= ceiling:
            return None
    bm25 |= conn.execute(scores, (both,))
    best = _best(bm25, decay, query.limit)
    return best if best[-1][0] > _ceiling(counts, common, fresh=True) else None


def items(
    conn: sqlite3.Connection,
    table: MemoryType,
    best: list[tuple[float, int]],
    params: dict[str, Any],
) -> list[MemoryItem]:
    """The winners' rows as items, best first, with the scores that ranked them (a row
    forgotten since it was ranked is left out)."""
    params["ids"] = json.dumps([key for _, key in best])
    rows = {row[0]: row for row in conn.execute(_ROWS.format(**_names(table)), params)}
    return [
        memory_item(table, (*rows[key][:SCORE], score, *rows[key][SCORE + 1 :]))
        for score, key in best
        if key in rows
    ]


def _small(
    conn: sqlite3.Connection,
    table: MemoryType,
    query: SearchQuery,
    phrases: list[str],
    params: dict[str, Any],
    filters: str,
) -> list[MemoryItem]:
    """A small table's best matches, every one of the scope scored in one statement."""
    sql = _SCORED.format(filters=filters, **_names(table))
    params |= {"match": _scoped_match(query.scope, phrases), "limit": query.limit}
    return [memory_item(table, row) for row in conn.execute(sql, params)]


def item_rows(table: MemoryType) -> tuple[str, str]:
    """A statement reading a type's rows as `memory_item` takes them (the score left NULL), to
    be completed with conditions on its alias; and the alias's key column."""
    (key, _), alias = _KEY_AND_TIME[table], ALIAS[table]
    select = f"SELECT {_COLUMNS[table]}, NULL, {_LATER[table]} FROM {_CONTENT[table]} AS {alias}"
    return select, f"{alias}.{key}"


def _names(table: MemoryType) -> dict[str, str]:
    """What the statements above call a table's parts."""
    (key, at), alias = _KEY_AND_TIME[table], ALIAS[table]
    return {
        "table": _CONTENT[table],
        "alias": alias,
        "key": key,
        "at": at,
        "fts": _FTS[table],
        "columns": _COLUMNS[table],
        "decay": _DECAY.format(at=f"{alias}.{at}"),
        "later": _LATER[table],
    }


def turn_text(messages: bytes) -> tuple[str, str]:
    """An interaction's speakers and its text, one "speaker: text" line per message."""
    decoded = _MESSAGES.decode(messages)
    speakers = dict.fromkeys(m.name or m.role for m in decoded)
    return ", ".join(speakers), speaker_lines(decoded)


def shown_turn(messages: bytes) -> tuple[str, str]:
    """A turn as recall holds it: `turn_text`, each message cut to SHOWN_MESSAGE_CHARS and all
    of them to SHOWN_TURN_CHARS, at a word, and marked where cut."""
    decoded = _MESSAGES.decode(messages)
    room, shown = SHOWN_TURN_CHARS, []
    for message in decoded:
        allowed = min(room, SHOWN_MESSAGE_CHARS)
        shown.append(msgspec.structs.replace(message, text=_cut(message.text, allowed)))
        room -= min(len(message.text), allowed)
        if room <= 0:
            break
    speakers = dict.fromkeys(m.name or m.role for m in decoded)
    return ", ".join(speakers), speaker_lines(shown)


def _cut(text: str, room: int) -> str:
    """The text, or its first `room` characters up to the last space among them, marked."""
    if len(text) <= room:
        return text
    head = text[:room]
    at = head.rfind(" ", room // 2)
    return (head[:at] if at > 0 else head) + " " + CUT


def fact_items(sql: Any, ids: Iterable[int]) -> list[MemoryItem]:
    """Facts by id as recall's items, unscored (portable SQL: either store's connection)."""
    query = f"SELECT {_COLUMNS['fact']}, 0.0, {_LATER['fact']} FROM facts AS f WHERE f.id = ?"
    rows = [sql.execute(query, (i,)).fetchone() for i in ids]
    return [memory_item("fact", row) for row in rows if row is not None]


def memory_item(table: MemoryType, row: tuple[Any, ...]) -> MemoryItem:
    id_, kind, scope, session, text, created, seen, first, last, first_at, last_at, score = row[:12]
    superseded_by, invalid_at = row[12:]
    speaker = None
    if table == "interaction":
        speaker, text = shown_turn(text)
    return MemoryItem(
        id=id_,
        type=table,
        kind=kind,
        scope=scope,
        session=session,
        text=text,
        score=score,
        created_at=created,
        last_seen_at=seen,
        first_seq=first,
        last_seq=last,
        first_at=first_at,
        last_at=last_at,
        speaker=speaker,
        superseded_by=superseded_by,
        invalid_at=invalid_at,
    )
