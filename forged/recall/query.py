"""What a search asks: the request, its words as FTS5 phrases, and its filters as SQL."""

from __future__ import annotations

import time
from typing import Any

import msgspec

from forged.models import MEMORY_TYPES, MemoryType
from forged.recall.packing import content_words
from forged.store.cjk import cjk_grams

__all__ = [
    "ALIAS",
    "CURRENT",
    "MAX_QUERY_TERMS",
    "SECONDS_PER_DAY",
    "UNCONDENSED",
    "UNIX_EPOCH_JULIAN_DAY",
    "SearchQuery",
    "conditions",
    "fts_query",
    "julian_now",
    "kind_type",
    "query_phrases",
    "searched",
    "searched_words",
]

MAX_QUERY_TERMS = 64  # distinct words of a query searched, unless it says (`max_words`)
UNIX_EPOCH_JULIAN_DAY = 2440587.5  # julianday('1970-01-01'), to compare with SQLite's dates
SECONDS_PER_DAY = 86400.0
CURRENT = "superseded_by IS NULL"  # a fact no consolidation has retired
UNCONDENSED = "condensed_into IS NULL"  # a summary no condensed one stands in for
ALIAS: dict[MemoryType, str] = {"fact": "f", "summary": "s", "interaction": "i"}
_SPAN_COLUMNS: dict[MemoryType, tuple[str, str]] = {  # what since and until compare with
    "fact": ("f.first_at", "f.last_at"),
    "summary": ("s.first_at", "s.last_at"),
    "interaction": ("i.timestamp", "i.timestamp"),
}


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
    max_words: int = MAX_QUERY_TERMS  # distinct words searched; the later ones are dropped


def _distinct_words(text: str) -> list[str]:
    """The query's words, each once, in order: what it holds besides punctuation."""
    text = text.replace("\x00", " ")  # FTS5 reads its query as a C string: NUL would cut it
    terms = dict.fromkeys(cjk_grams(text).split())  # CJK as the indexes hold it
    return [t for t in terms if any(c.isalnum() for c in t)]  # the tokenizer drops the rest


def query_phrases(text: str, max_words: int = MAX_QUERY_TERMS) -> list[str]:
    """The user's first `max_words` distinct words as quoted FTS5 phrases; none when there is
    no word to search.

    Every word is quoted (`"` doubled inside), so no character or keyword is ever read as FTS
    syntax. Each word searched costs a pass over its rows in the index: the limit bounds what
    one query may cost.
    """
    return ['"' + w.replace('"', '""') + '"' for w in _distinct_words(text)[:max_words]]


def dropped_words(query: SearchQuery) -> list[str]:
    """The distinct words past the query's `max_words`, which are not searched."""
    return _distinct_words(query.q)[query.max_words :]


def _meaningful(phrases: list[str]) -> list[str]:
    """The phrases without function words ("what", "did", "the"), unless only those are left.

    FTS5 indexes every word, and BM25 still gives "when" or "what" some weight: a question
    would rank first the turns that ask something. PostgreSQL's english configuration leaves
    them out of a query the same way.
    """
    kept = [p for p in phrases if content_words(p)]
    return kept or phrases


def searched(query: SearchQuery) -> list[str]:
    """The phrases a query is searched for: its words, without function words unless asked."""
    phrases = query_phrases(query.q, query.max_words)
    return phrases if query.function_words else _meaningful(phrases)


def searched_words(query: SearchQuery) -> list[str]:
    """The words a query is searched for, as `searched` picks them, unquoted."""
    words = _distinct_words(query.q)[: query.max_words]
    return words if query.function_words else _meaningful(words)


def fts_query(phrases: list[str]) -> str:
    """Phrases joined by OR: BM25 ranks what matches more and rarer words first, so a question
    asked in full sentences still finds memory that shares only some of its words."""
    return " OR ".join(phrases)


def julian_now() -> float:
    """The current time as a Julian day number, the unit of SQLite's `julianday()`."""
    return time.time() / SECONDS_PER_DAY + UNIX_EPOCH_JULIAN_DAY


def kind_type(kind: str) -> MemoryType:
    """The type of memory a `kind` selects: summaries, or facts of that kind."""
    return "summary" if kind == "summary" else "fact"


def conditions(table: MemoryType, query: SearchQuery, params: dict[str, Any]) -> str:
    """The SQL conditions for the query's kind, session and time span, with their parameters."""
    alias, (first_at, last_at) = ALIAS[table], _SPAN_COLUMNS[table]
    sql = ""
    if table == "fact" and not query.history:
        sql += f" AND {alias}.{CURRENT}"
    if table == "summary" and not query.history:
        sql += f" AND {alias}.{UNCONDENSED}"
    if query.kind is not None and table == "fact":
        sql += f" AND {alias}.kind = :kind"
        params["kind"] = query.kind
    if query.session is not None:
        sql += f" AND {alias}.session = :session"
        params["session"] = query.session
    if query.since is not None:  # spans that overlap [since, until]
        sql += f" AND {last_at} >= :since"
        params["since"] = query.since
    if query.until is not None:
        sql += f" AND {first_at} <= :until"
        params["until"] = query.until
    return sql
