"""Recall: full-text search with recency decay over SQLite, and listing; the lists are fused
(`fusion`) and a context block packed (`packing`) alike on both stores."""

from __future__ import annotations

import functools
import heapq
import json
import math
import sqlite3
import sys
import time
from collections.abc import Iterable
from typing import Any

import msgspec

from forged.backend import Backend
from forged.config import RecallConfig
from forged.fusion import by_coverage, fused_top, plain
from forged.models import (
    MEMORY_TYPES,
    ContextAnswer,
    FactAudit,
    FactChange,
    FactsPage,
    MemoryItem,
    MemoryType,
    Message,
    StoredFact,
    StoredSummary,
    SummariesPage,
    Turn,
)
from forged.packing import content_words, pack
from forged.portable import portable
from forged.tokens import estimate_tokens
from forged.when import periods

MAX_QUERY_TERMS = 64  # words of a query that are searched; an agent may pass a whole message
UNIX_EPOCH_JULIAN_DAY = 2440587.5  # julianday('1970-01-01'), to compare with SQLite's dates
SECONDS_PER_DAY = 86400.0
SELECTIVE_MIN_ROWS = 1000  # below this many rows every word of a query makes a row match
STREAMED_MIN_ROWS = 20_000  # below this many rows a search scores every match of the scope
KNOWN_LINE_TOKENS = 12  # a known fact's line beside its text: "[fact N] (kind, date) "
RECOUNT_SHARE = 0.1  # a word's share of a table is counted again once the table grew this much
COUNTS_KEPT = 4096  # phrases whose count of rows is remembered (then forgotten all at once)
BM25_K1 = 1.2  # FTS5's bm25() term-frequency saturation: a phrase adds under IDF * (k1 + 1)
RARE_SHARE = 0.5  # a phrase weighing less than this share of the query's heaviest is common
RECENCY_FLOOR = 0.5  # the least share of its score an item keeps however old it is
PAGE_DEFAULT = 100  # facts or summaries in a listing page when the request gives no limit
PAGE_MAX = 1000  # largest listing page a request may ask for

# Recency: the score halves with each half-life since it happened, down to RECENCY_FLOOR of
# it, so that what is recent wins among equals and what is old but relevant is still found.
_DECAY = "(:floor + (1 - :floor) * pow(0.5, max(0.0, :now - julianday({at})) / :half_life))"
SCORE = 11  # where the score sits in the row _item reads, after _COLUMNS
_COLUMNS = {  # an item's row, in the order _item reads it
    "fact": "f.id, f.kind, f.scope, f.session, f.text, f.created_at, f.last_seen_at, f.first_seq,"
    " f.last_seq, f.first_at, f.last_at",
    "summary": "s.id, 'summary', s.scope, s.session, s.text, s.created_at, s.created_at,"
    " s.first_seq, s.last_seq, s.first_at, s.last_at",
    "interaction": "i.seq, 'interaction', i.scope, i.session, i.messages, i.received_at,"
    " i.received_at, i.seq, i.seq, i.timestamp, i.timestamp",
}
_LATER = {  # what _item reads after the score: what retired the item, and when
    "fact": "f.superseded_by, f.invalid_at", "summary": "s.condensed_into, NULL",
    "interaction": "NULL, NULL",
}  # fmt: skip
# The winners' rows, with their recency decay.
_ROWS = """
    SELECT {columns}, {decay}, {later} FROM {table} AS {alias}
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
# The candidates the index found that pass the filters (SQL's), with their recency decay: only
# the key and a number per candidate, so that reading many costs little.
_DECAYS = """
    SELECT {alias}.{key}, {decay} FROM {table} AS {alias}
    WHERE {alias}.{key} IN (SELECT value FROM json_each(:ids)) AND {alias}.scope = :scope {filters}
"""
_KEY_AND_TIME: dict[MemoryType, tuple[str, str]] = {
    "fact": ("id", "last_at"), "summary": ("id", "last_at"), "interaction": ("seq", "timestamp")
}  # fmt: skip
# The index's matches in the scope, best BM25 first ('rank' is BM25 over the text column).
_MATCHES = "SELECT rowid, -rank FROM {fts} WHERE {fts} MATCH ? ORDER BY rank"
FIRST_CANDIDATES = 32  # matches looked up at first; each further lookup takes twice as many
_FTS: dict[MemoryType, str] = {
    "fact": "facts_fts", "summary": "summaries_fts", "interaction": "interactions_fts"
}  # fmt: skip
_CONTENT: dict[MemoryType, str] = {
    "fact": "facts", "summary": "summaries", "interaction": "interactions"
}  # fmt: skip
_ALIAS: dict[MemoryType, str] = {"fact": "f", "summary": "s", "interaction": "i"}
_SPAN_COLUMNS: dict[MemoryType, tuple[str, str]] = {  # what since and until compare with
    "fact": ("f.first_at", "f.last_at"),
    "summary": ("s.first_at", "s.last_at"),
    "interaction": ("i.timestamp", "i.timestamp"),
}
_SOURCES = """
    SELECT seq, session, timestamp, messages FROM interactions
    WHERE scope = ? AND seq BETWEEN ? AND ? ORDER BY seq
"""
_SAID = """
    SELECT seq, messages FROM interactions
    WHERE seq IN (SELECT value FROM json_each(?)) AND scope = ?
"""  # turns by seq, for the facts that may repeat them
_FACT_COLUMNS = (
    "id, kind, scope, session, text, created_at, last_seen_at, seen_count, first_seq, last_seq,"
    " batch_id, first_at, last_at, first_at, invalid_at, superseded_by, superseded_reason"
)
_CURRENT = "superseded_by IS NULL"  # a fact no consolidation has retired
_UNCONDENSED = "condensed_into IS NULL"  # a summary no condensed one stands in for
_TRAIL = """
    SELECT action, run_id, reason, created_at, {other} FROM consolidation_changes
    WHERE {this} = ? AND action != 'condense' ORDER BY id
"""  # a fact's changes, each with the fact on its other side
_SUMMARY_COLUMNS = (
    "id, scope, session, text, created_at, first_seq, last_seq, batch_id, observer, first_at,"
    " last_at, condensed_into"
)
_MESSAGES = msgspec.json.Decoder(list[Message])
# (database file, index, phrase) -> (rows then, rows holding the phrase): see _Counts
_COUNTED: dict[tuple[str, str, str], tuple[int, int]] = {}


class SearchQuery(msgspec.Struct, frozen=True):
    """A validated search: the words, where and when to look, what, and how many results."""

    q: str
    scope: str
    limit: int
    kind: str | None = None
    session: str | None = None
    types: tuple[str, ...] = MEMORY_TYPES  # of fact, summary, interaction
    since: str | None = None  # items whose time span reaches this moment or later
    until: str | None = None  # items whose time span starts at this moment or earlier
    sources: bool = False  # attach each fact's and summary's source interactions
    history: bool = False  # superseded facts too, marked and dated
    function_words: bool = False  # search "the", "did", "what" too, not only the other words


def query_phrases(text: str) -> list[str]:
    """The user's words as quoted FTS5 phrases; none when there is no word to search.

    Every word is quoted (`"` doubled inside), so no character or keyword is ever read as FTS
    syntax.
    """
    text = text.replace("\x00", " ")  # FTS5 reads its query as a C string: NUL would cut it
    terms = list(dict.fromkeys(text.split()))[:MAX_QUERY_TERMS]
    words = [t for t in terms if any(c.isalnum() for c in t)]  # the tokenizer drops the rest
    return ['"' + w.replace('"', '""') + '"' for w in words]


def _meaningful(phrases: list[str]) -> list[str]:
    """The phrases without function words ("what", "did", "the"), unless only those are left.

    FTS5 indexes every word, and BM25 still gives "when" or "what" some weight: a question
    would rank first the turns that ask something. PostgreSQL's english configuration leaves
    them out of a query the same way.
    """
    kept = [p for p in phrases if content_words(p)]
    return kept or phrases


def _searched(query: SearchQuery) -> list[str]:
    """The phrases a query is searched for: its words, without function words unless asked."""
    phrases = query_phrases(query.q)
    return phrases if query.function_words else _meaningful(phrases)


def fts_query(phrases: list[str]) -> str:
    """Phrases joined by OR: BM25 ranks what matches more and rarer words first, so a question
    asked in full sentences still finds memory that shares only some of its words."""
    return " OR ".join(phrases)


class _Counts:
    """One table's bound on its row count and how many of its rows hold each phrase.

    Counting is a pass over the phrase's postings, so a count is kept for the next queries of
    the same database while the table stays within RECOUNT_SHARE of the size it had then.
    """

    def __init__(self, conn: sqlite3.Connection, table: MemoryType) -> None:
        key = _KEY_AND_TIME[table][0]  # keys start at 1 and are never reused: max >= count
        sql = f"SELECT coalesce(max({key}), 0) FROM {_CONTENT[table]}"
        self.conn, self.fts, self.rows = conn, _FTS[table], int(conn.execute(sql).fetchone()[0])

    @functools.cached_property
    def database(self) -> str:
        """The database file, which the kept counts are of ("" in memory: none kept)."""
        return str(self.conn.execute("PRAGMA database_list").fetchone()[2])

    def documents(self, phrase: str, *, fresh: bool = False) -> int:
        """The rows holding a phrase, counted up to just over half; `fresh` counts again."""
        rows, key = self.rows, (self.database, self.fts, phrase)
        known = _COUNTED.get(key)
        if (
            not fresh
            and self.database
            and known
            and abs(rows - known[0]) <= RECOUNT_SHARE * known[0]
        ):
            return known[1]
        count = f"SELECT count(*) FROM (SELECT 1 FROM {self.fts} WHERE {self.fts} MATCH ? LIMIT ?)"
        (documents,) = self.conn.execute(count, (f"text : {phrase}", rows // 2 + 1)).fetchone()
        if len(_COUNTED) >= COUNTS_KEPT:
            _COUNTED.clear()
        _COUNTED[key] = (rows, int(documents))
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


def julian_now() -> float:
    """The current time as a Julian day number, the unit of SQLite's `julianday()`."""
    return time.time() / SECONDS_PER_DAY + UNIX_EPOCH_JULIAN_DAY


def kind_type(kind: str) -> MemoryType:
    """The type of memory a `kind` selects: summaries, or facts of that kind."""
    return "summary" if kind == "summary" else "fact"


def _filters(table: MemoryType, query: SearchQuery, params: dict[str, Any]) -> str:
    """The SQL conditions for the query's kind, session and time span, with their parameters."""
    alias, (first_at, last_at) = _ALIAS[table], _SPAN_COLUMNS[table]
    filters = ""
    if table == "fact" and not query.history:
        filters += f" AND {alias}.{_CURRENT}"
    if table == "summary" and not query.history:
        filters += f" AND {alias}.{_UNCONDENSED}"
    if query.kind is not None and table == "fact":
        filters += f" AND {alias}.kind = :kind"
        params["kind"] = query.kind
    if query.session is not None:
        filters += f" AND {alias}.session = :session"
        params["session"] = query.session
    if query.since is not None:  # spans that overlap [since, until]
        filters += f" AND {last_at} >= :since"
        params["since"] = query.since
    if query.until is not None:
        filters += f" AND {first_at} <= :until"
        params["until"] = query.until
    return filters


def scope_token(scope: str) -> str:
    """The token that stands for a scope in the full-text indexes (schema.SCOPE_TOKEN)."""
    return f"s{scope.encode().hex()}0"


def _scoped_match(scope: str, phrases: list[str]) -> str:
    """The FTS5 query for any of the phrases in the text of one scope's rows."""
    return f'scope : "{scope_token(scope)}" AND text : ({fts_query(phrases)})'


def _decayed(
    conn: sqlite3.Connection, sql: str, params: dict[str, Any], keys: Iterable[int]
) -> dict[int, float]:
    """The recency decay of each candidate that passes the query's filters."""
    params["ids"] = json.dumps(list(keys))
    return dict(conn.execute(sql, params))


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

    The index gives the scope's matches by BM25 alone; their decays are read best first, a few
    at a time, and the reading stops once the results are better than BM25 times the largest
    decay (1) of the next match: nothing after it can enter. Only the winners' rows are read in
    full. The answer is the exact ranking. A table under STREAMED_MIN_ROWS rows has too few
    matches for this to pay: one statement scores them all.
    """
    phrases = _searched(query)
    if not phrases:
        return []
    counts = _Counts(conn, table)
    phrases = _selective(counts, phrases)
    params: dict[str, Any] = {"scope": query.scope, "now": now, "half_life": half_life,
                              "floor": RECENCY_FLOOR}  # fmt: skip
    filters = _filters(table, query, params)
    if counts.rows < STREAMED_MIN_ROWS:
        return _small(conn, table, query, phrases, params, filters)
    decays = _DECAYS.format(filters=filters, **_names(table))
    rare, common = _split(counts, phrases)
    best = _pruned(conn, counts, query, decays, params, rare, common) if common else None
    if best is None:
        best = _streamed(conn, table, query, decays, params, phrases)
    return _items(conn, table, best, params)


def _streamed(
    conn: sqlite3.Connection,
    table: MemoryType,
    query: SearchQuery,
    decays: str,
    params: dict[str, Any],
    phrases: list[str],
) -> list[tuple[float, int]]:
    """The best of all matches, read best BM25 first until nothing left can enter."""
    match = _scoped_match(query.scope, phrases)
    matches = conn.execute(_MATCHES.format(fts=_FTS[table]), (match,))
    best: list[tuple[float, int]] = []
    size = FIRST_CANDIDATES
    try:
        while batch := matches.fetchmany(size):
            if len(best) == query.limit:  # a match under the last result cannot enter
                batch = [m for m in batch if m[1] >= best[-1][0]]  # best first: a prefix
            if not batch:
                break
            bm25 = dict(batch)
            scored = _best(bm25, _decayed(conn, decays, params, bm25), query.limit)
            best = heapq.nlargest(query.limit, best + scored)
            size *= 2
    finally:
        matches.close()
    return best


def _pruned(
    conn: sqlite3.Connection,
    counts: _Counts,
    query: SearchQuery,
    decays: str,
    params: dict[str, Any],
    rare: list[str],
    common: list[str],
) -> list[tuple[float, int]] | None:
    """The best of the matches that hold a rare phrase, if no row holding only common ones can
    beat them (their BM25 stays under `_ceiling`); else None.

    A word common in the scope ("report" in every note of a team) makes every row of it a
    match whose BM25 must be computed; a rare word of the same query finds far fewer.
    """
    scores = f"SELECT rowid, -rank FROM {counts.fts} WHERE {counts.fts} MATCH ?"
    with_rare = _scoped_match(query.scope, rare)
    bm25 = dict(conn.execute(scores, (with_rare,)))  # exact where no common phrase is held too
    decay = _decayed(conn, decays, params, bm25)
    best = _best(bm25, decay, query.limit)  # each at most its score: a bound from below
    if len(best) < query.limit or best[-1][0] <= _ceiling(counts, common):
        return None
    bm25 |= conn.execute(scores, (f"{with_rare} AND text : ({fts_query(common)})",))
    best = _best(bm25, decay, query.limit)
    return best if best[-1][0] > _ceiling(counts, common, fresh=True) else None


def _items(
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
        _item(table, (*rows[key][:SCORE], score, *rows[key][SCORE + 1 :]))
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
    return [_item(table, row) for row in conn.execute(sql, params)]


def _names(table: MemoryType) -> dict[str, str]:
    """What the statements above call a table's parts."""
    (key, at), alias = _KEY_AND_TIME[table], _ALIAS[table]
    return {"table": _CONTENT[table], "alias": alias, "key": key, "fts": _FTS[table],
            "columns": _COLUMNS[table], "decay": _DECAY.format(at=f"{alias}.{at}"),
            "later": _LATER[table]}  # fmt: skip


_EXACT = """
    SELECT c.{key} FROM {fts} JOIN {table} AS c ON c.{key} = {fts}.rowid
    WHERE {fts} MATCH :match AND c.scope = :scope
    ORDER BY -bm25({fts}, 1.0, 0.0) * {decay} DESC, c.{key} DESC LIMIT :limit
"""  # every match of every scope joined to its row: the ranking `ranked` gives, without shortcut


def exact_ids(
    conn: sqlite3.Connection, table: MemoryType, query: SearchQuery, half_life: float, now: float
) -> list[int]:
    """The ids `ranked` must return for a query without filters, by scoring every match."""
    phrases = _searched(query)
    if not phrases:
        return []
    key, at = _KEY_AND_TIME[table]
    sql = _EXACT.format(fts=_FTS[table], table=_CONTENT[table], key=key,
                        decay=_DECAY.format(at=f"c.{at}"))  # fmt: skip
    params = {"match": f"text : ({fts_query(_selective(_Counts(conn, table), phrases))})",
              "scope": query.scope, "limit": query.limit, "now": now, "half_life": half_life,
              "floor": RECENCY_FLOOR}  # fmt: skip
    return [k for (k,) in conn.execute(sql, params)]


def _turn_text(messages: bytes) -> tuple[str, str]:
    """An interaction's speakers and its text, one "speaker: text" line per message."""
    decoded = _MESSAGES.decode(messages)
    speakers = [m.name or m.role for m in decoded]
    text = "\n".join(f"{who}: {m.text}" for who, m in zip(speakers, decoded, strict=True))
    return ", ".join(dict.fromkeys(speakers)), text


def _item(table: MemoryType, row: tuple[Any, ...]) -> MemoryItem:
    id_, kind, scope, session, text, created, seen, first, last, first_at, last_at, score = row[:12]
    superseded_by, invalid_at = row[12:]
    speaker = None
    if table == "interaction":
        speaker, text = _turn_text(text)
    return MemoryItem(id=id_, type=table, kind=kind, scope=scope, session=session, text=text,
                      score=score, created_at=created, last_seen_at=seen, first_seq=first,
                      last_seq=last, first_at=first_at, last_at=last_at,
                      speaker=speaker, superseded_by=superseded_by,
                      invalid_at=invalid_at)  # fmt: skip


def _with_sources(conn: sqlite3.Connection, item: MemoryItem) -> MemoryItem:
    """A fact or summary with the interactions it was distilled from."""
    if item.type == "interaction":
        return item
    rows = conn.execute(_SOURCES, (item.scope, item.first_seq, item.last_seq)).fetchall()
    turns = [Turn(seq, session, at, *_turn_text(messages)) for seq, session, at, messages in rows]
    return msgspec.structs.replace(item, sources=turns)


def search(
    conn: sqlite3.Connection, query: SearchQuery, half_life_days: float, now: float | None = None
) -> list[MemoryItem]:
    """The best `query.limit` items of one scope: each type ranked by BM25 times recency decay,
    the lists merged by reciprocal rank fusion."""
    now = julian_now() if now is None else now
    wanted = query.types if query.kind is None else (kind_type(query.kind),)
    types = [t for t in MEMORY_TYPES if t in wanted]

    def rank(table: MemoryType, depth: int) -> list[MemoryItem]:
        deep = msgspec.structs.replace(query, limit=depth)
        return ranked(conn, table, deep, half_life_days, now)

    def said(seqs: list[int]) -> dict[int, str]:
        rows = conn.execute(_SAID, (json.dumps(seqs), query.scope))
        return {seq: plain(_turn_text(messages)[1]) for seq, messages in rows}

    found = fused_top(rank, types, query.limit, periods(query.q), said)
    if query.sources:
        found = [_with_sources(conn, i) for i in found]
    return found


class Page(msgspec.Struct, frozen=True):
    """A validated listing request: which rows, from where, how many."""

    scope: str | None = None
    kind: str | None = None
    after: int = 0
    limit: int = PAGE_DEFAULT
    since: str | None = None  # rows whose time span reaches this moment or later
    until: str | None = None  # rows whose time span starts at this moment or earlier
    history: bool = False  # superseded facts and condensed summaries too


def _page_where(page: Page, current: str | None = None) -> tuple[str, list[Any]]:
    clauses: list[str] = ["id > ?"] + ([current] if current and not page.history else [])
    params: list[Any] = [page.after]  # a keyset page: later inserts cannot shift it
    for clause, value in (("scope = ?", page.scope), ("kind = ?", page.kind),
                          ("last_at >= ?", page.since), ("first_at <= ?", page.until)):  # fmt: skip
        if value is not None:
            clauses.append(clause)
            params.append(value)
    return " AND ".join(clauses), params


def list_facts(conn: sqlite3.Connection, page: Page) -> FactsPage:
    """Facts with id greater than `after`, in id order: a keyset page that new facts never shift."""
    where, params = _page_where(page, _CURRENT)
    rows = conn.execute(
        f"SELECT {_FACT_COLUMNS} FROM facts WHERE {where} ORDER BY id LIMIT ?",
        (*params, page.limit + 1),
    ).fetchall()
    facts = [StoredFact(*r) for r in rows[: page.limit]]
    return FactsPage(facts=facts, next=str(facts[-1].id) if len(rows) > page.limit else None)


def list_summaries(conn: sqlite3.Connection, page: Page) -> SummariesPage:
    """Summaries with id greater than `after`, in id order."""
    where, params = _page_where(msgspec.structs.replace(page, kind=None), _UNCONDENSED)
    rows = conn.execute(
        f"SELECT {_SUMMARY_COLUMNS} FROM summaries WHERE {where} ORDER BY id LIMIT ?",
        (*params, page.limit + 1),
    ).fetchall()
    summaries = [StoredSummary(*r) for r in rows[: page.limit]]
    next_cursor = str(summaries[-1].id) if len(rows) > page.limit else None
    return SummariesPage(summaries=summaries, next=next_cursor)


def _fact(conn: sqlite3.Connection, fact_id: int) -> StoredFact | None:
    row = conn.execute(f"SELECT {_FACT_COLUMNS} FROM facts WHERE id = ?", (fact_id,)).fetchone()
    return None if row is None else StoredFact(*row)


def _changes(conn: sqlite3.Connection, fact_id: int, this: str, other: str) -> list[FactChange]:
    rows = conn.execute(_TRAIL.format(this=this, other=other), (fact_id,)).fetchall()
    return [
        FactChange(action, run, reason, at, fact)
        for action, run, reason, at, other_id in rows
        if (fact := _fact(conn, other_id)) is not None
    ]


def fact_audit(conn: sqlite3.Connection, fact_id: int) -> FactAudit | None:
    """A fact with its audit trail: the facts it replaced and the change that retired it."""
    conn = portable(conn)
    fact = _fact(conn, fact_id)
    if fact is None:
        return None
    retired = _changes(conn, fact_id, "fact_id", "into_id")
    replaced = _changes(conn, fact_id, "into_id", "fact_id")
    return FactAudit(fact, replaced, retired[-1] if retired else None)


class Recall:
    """Recall over a store, with the configured decay, limits and budget."""

    def __init__(self, store: Backend, config: RecallConfig) -> None:
        self.store = store
        self.config = config
        self._queries: Any = sys.modules[__name__]  # search, list_facts and list_summaries
        if store.backend == "postgresql":
            from forged import pgrecall  # the same answers, from tsvector and GIN

            self._queries = pgrecall

    async def search(self, query: SearchQuery) -> list[MemoryItem]:
        return await self.store.read(self._queries.search, query, self.config.half_life_days)

    async def context(self, query: SearchQuery, budget_tokens: int) -> ContextAnswer:
        """The best candidates (up to `max_limit`) packed into the budget."""
        candidates = msgspec.structs.replace(query, limit=self.config.max_limit)
        return pack(by_coverage(await self.search(candidates), query.q), budget_tokens)

    async def related(self, scope: str, text: str, budget_tokens: int) -> list[MemoryItem]:
        """The scope's current facts that recall finds for `text`, best first, while they fit
        `budget_tokens`: what a distiller is shown beside a transcript. Near-duplicates stay
        (unlike in a context block): a new state must be able to replace every one of them.
        Every word of the transcript is searched, function words too: a new state often shares
        no other word with the one it replaces ("We moved to Berlin", "They live in Lisbon")."""
        query = SearchQuery(q=text, scope=scope, limit=self.config.max_limit, types=("fact",),
                            function_words=True)  # fmt: skip
        shown, used = [], 0
        for fact in await self.search(query):
            cost = estimate_tokens(fact.text) + KNOWN_LINE_TOKENS
            if used + cost <= budget_tokens:
                shown.append(fact)
                used += cost
        return shown

    async def facts(self, page: Page) -> FactsPage:
        return await self.store.read(self._queries.list_facts, page)

    async def summaries(self, page: Page) -> SummariesPage:
        return await self.store.read(self._queries.list_summaries, page)

    async def fact(self, fact_id: int) -> FactAudit | None:
        return await self.store.read(fact_audit, fact_id)
