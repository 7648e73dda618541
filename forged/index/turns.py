"""The turns' full-text index beside the store: a tantivy index of every stored interaction's
text, derived from the log and never its record, the last seq it holds kept in its own commit.

The store stays the record of everything; this index may be deleted at any time and is rebuilt
from the log. It answers one question fast at any size: a scope's best turns for some words by
BM25, where FTS5 scores every match in SQL. Each commit holds one `watermark` document with the
last seq indexed and the index's version, so the turns and the watermark move together and a
crash loses nothing: the keeper starts again after that seq.
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import tantivy

__all__ = [
    "SCHEMA_VERSION",
    "IndexStats",
    "IndexView",
    "Matches",
    "TurnIndex",
    "TurnText",
    "rounded_lengths",
    "terms",
]

SCHEMA_VERSION = 2  # raised when the fields or the analyzer change: an older index is rebuilt
MAX_TOKEN_BYTES = 40  # longer "words" (hashes, base64) are not indexed, as in tantivy's default
WRITER_HEAP = 32_000_000  # bytes the writer buffers before it writes a segment of its own
WRITER_THREADS = 1  # the daemon's event loop and readers keep the other core
_ANALYZER = "forged"  # the text field's analyzer, registered under this name
FIELDNORM_EXACT = 40  # tantivy stores a turn's length exactly up to this many terms...
FIELDNORM_CODES = 256  # ...and in one byte in all: past it, eight lengths per doubling step
# Characters handed to the analyzer at once: it holds the GIL while it runs (the event loop
# waited 0.65 s on a 7 MB turn's), so a long text goes in pieces of at most this many.
MAX_ANALYZED = 65_536
# Where a piece may end: a space or ASCII punctuation ends a word for the tokenizer too.
_BETWEEN_WORDS = re.compile(r"[\s!-/:-@\[-`{-~]")
_WATERMARK = "watermark"  # the `kind` of the one document holding the last seq indexed
_TURN = "turn"


@dataclass(frozen=True, slots=True)
class TurnText:
    """What the index holds of a stored turn: its seq, its scope, when it happened (a Julian
    day, as SQLite's julianday()), its searchable text and its session."""

    seq: int
    scope: str
    at: float
    text: str
    session: str | None = None


@dataclass(frozen=True, slots=True)
class Matches:
    """The turns the index found, best first, as columns (recall scores them all at once, in
    numpy): each one's seq, its BM25 as tantivy computes it (FTS5's but for a turn's length,
    exact to 40 terms and rounded down to a byte's worth past that: `rounded_lengths`), when it
    happened (a Julian day) and its exact length in terms."""

    seq: npt.NDArray[np.int64]
    bm25: npt.NDArray[np.float64]
    at: npt.NDArray[np.float64]
    terms: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.seq)


@dataclass(frozen=True, slots=True)
class IndexStats:
    """What BM25 needs of the whole index: its turns and their average length in terms."""

    turns: int
    average_terms: float


def _analyzer() -> tantivy.TextAnalyzer:
    """Words split at anything not a letter or digit, long ones dropped, lower-cased, accents
    folded and English endings stemmed: what FTS5's `porter unicode61 remove_diacritics 2`
    does to the store's copy."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(MAX_TOKEN_BYTES))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


_TERMS = _analyzer()


def _pieces(text: str) -> list[str]:
    """The text cut in pieces of MAX_ANALYZED characters at most, each after a space or
    punctuation in its second half when there is one (else where it must: one word of 32,768
    characters without a space or ASCII punctuation may count as two)."""
    pieces, start = [], 0
    while len(text) - start > MAX_ANALYZED:
        half = start + MAX_ANALYZED // 2
        found = _BETWEEN_WORDS.search(text, half, start + MAX_ANALYZED)
        end = found.end() if found else start + MAX_ANALYZED
        pieces.append(text[start:end])
        start = end
    pieces.append(text[start:])
    return pieces


def terms(text: str) -> list[str]:
    """The terms the index holds for `text`, in order, repeats kept (linear in its length;
    analyzed a piece at a time, so that the GIL is let go between pieces)."""
    return [term for piece in _pieces(text) for term in _TERMS.analyze(piece)]


def _fieldnorms() -> list[int]:
    """The lengths tantivy can store (its FIELD_NORMS_TABLE): every one to FIELDNORM_EXACT,
    then eight per step, the step doubling from 2."""
    lengths, step = list(range(FIELDNORM_EXACT + 1)), 2
    while len(lengths) < FIELDNORM_CODES:
        lengths += [lengths[-1] + step * k for k in range(1, 9)]
        step *= 2
    return lengths[:FIELDNORM_CODES]


_FIELDNORMS = np.array(_fieldnorms(), dtype=np.int64)


def rounded_lengths(lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The lengths tantivy's BM25 reads for turns of `lengths` terms: for each, the largest it
    can store that is not above it."""
    return _FIELDNORMS[np.searchsorted(_FIELDNORMS, lengths, side="right") - 1]


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("kind", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("scope", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("session", tokenizer_name="raw", index_option="basic")
    builder.add_integer_field("seq", indexed=True, fast=True)
    builder.add_integer_field("terms", fast=True)  # the turn's length, for BM25's average
    builder.add_float_field("at", indexed=True, fast=True)  # when: searched by windows of time
    builder.add_integer_field("version", stored=True)
    # term frequencies, no positions: recall searches words, never phrases (a third smaller)
    builder.add_text_field("text", tokenizer_name=_ANALYZER, index_option="freq")
    return builder.build()


def _opened(path: Path) -> tantivy.Index:
    """The index at `path` if it is one of this version that opens; else a new empty one in its
    place (a stale or damaged index is rebuilt from the store, never repaired)."""
    try:
        if tantivy.Index.exists(str(path)):
            index = tantivy.Index.open(str(path))
            index.register_tokenizer(_ANALYZER, _analyzer())
            if _recorded(index)[1] in (None, SCHEMA_VERSION):
                return index
    except (ValueError, OSError):
        pass
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    index = tantivy.Index(_schema(), path=str(path))
    index.register_tokenizer(_ANALYZER, _analyzer())
    return index


def _recorded(index: tantivy.Index) -> tuple[int, int | None]:
    """The watermark and version the index's last commit recorded ((0, None) when empty)."""
    searcher = index.searcher()
    query = tantivy.Query.term_query(index.schema, "kind", _WATERMARK)
    hits = searcher.search(query, 1, count=False).hits
    if not hits:
        return 0, None
    address = hits[0][1]
    (seq,) = searcher.fast_field_values("seq", [address])
    return int(seq or 0), searcher.doc(address).get_first("version")


_NOTHING, _NEVER = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
_NONE = Matches(_NOTHING, _NEVER, _NEVER, _NOTHING)


class IndexView:
    """One commit of the index, as a search reads it from start to end: its watermark, its
    statistics, each term's turns and the matches all of that commit, however many the keeper
    makes meanwhile (a turn read from the store's tail by one commit's watermark and counted
    again in the next one's terms made a term's turns outnumber the turns).

    Every method blocks: call each from a worker thread, never from the event loop.
    """

    def __init__(self, searcher: tantivy.Searcher, schema: tantivy.Schema, watermark: int) -> None:
        self._searcher, self._schema = searcher, schema
        self.watermark = watermark  # the last seq this commit holds
        self._stats: IndexStats | None = None  # counted on first use

    def stats(self) -> IndexStats:
        """How many turns the index holds and their average length in terms, counted once per
        view."""
        if self._stats is None:
            query = tantivy.Query.term_query(self._schema, "kind", _TURN)
            found = self._searcher.aggregate(query, {"n": {"stats": {"field": "terms"}}})
            counted = found["n"]
            self._stats = IndexStats(int(counted["count"]), float(counted["avg"] or 0.0))
        return self._stats

    def documents(self, term: str) -> int:
        """How many turns hold `term` (turns deleted since the last merge of their segment
        included, as in FTS5 until it merges)."""
        return int(self._searcher.doc_freq("text", term))

    def search(
        self,
        scope: str,
        weights: dict[str, float],
        depth: int,
        since: float | None,
        until: float | None,
        session: str | None = None,
    ) -> Matches:
        """The scope's `depth` best turns for any of the terms, each term weighing `weights[t]`
        in place of tantivy's own IDF (so that the order is BM25's under those weights), among
        the turns that happened from Julian day `since` (inclusive) to `until` (exclusive), of
        `session` if given."""
        if not weights:
            return _NONE
        schema, searcher = self._schema, self._searcher
        turns = searcher.num_docs
        text = []
        for term, weight in weights.items():
            documents = searcher.doc_freq("text", term)
            own = math.log(1 + (turns - documents + 0.5) / (documents + 0.5))  # tantivy's IDF
            boosted = tantivy.Query.boost_query(
                tantivy.Query.term_query(schema, "text", term), weight / max(own, 1e-9)
            )
            text.append((tantivy.Occur.Should, boosted))
        scope_only = tantivy.Query.term_query(schema, "scope", scope)
        clauses = [
            (tantivy.Occur.Must, tantivy.Query.const_score_query(scope_only, 0.0)),
            (tantivy.Occur.Must, tantivy.Query.boolean_query(text)),
        ]
        if session is not None:
            of_session = tantivy.Query.term_query(schema, "session", session)
            clauses.append((tantivy.Occur.Must, tantivy.Query.const_score_query(of_session, 0.0)))
        if since is not None or until is not None:
            when = tantivy.Query.range_query(
                schema, "at", tantivy.FieldType.Float, since, until, include_upper=until is None
            )
            clauses.append((tantivy.Occur.Must, tantivy.Query.const_score_query(when, 0.0)))
        hits = searcher.search(tantivy.Query.boolean_query(clauses), depth, count=False).hits
        if not hits:
            return _NONE
        addresses = [address for _, address in hits]
        return Matches(
            np.array(searcher.fast_field_values("seq", addresses), dtype=np.int64),
            np.array([score for score, _ in hits], dtype=np.float64),
            np.array(searcher.fast_field_values("at", addresses), dtype=np.float64),
            np.array(searcher.fast_field_values("terms", addresses), dtype=np.int64),
        )


class TurnIndex:
    """The index in a directory of its own: one writer (the keeper's), any number of searches.

    Every method blocks: call each from a worker thread, never from the event loop.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._index = _opened(path)
        self._schema = self._index.schema
        self._writer: tantivy.IndexWriter | None = None
        self.view = IndexView(self._index.searcher(), self._schema, _recorded(self._index)[0])

    @property
    def watermark(self) -> int:
        """The last seq of the last commit."""
        return self.view.watermark

    def _writing(self) -> tantivy.IndexWriter:
        if self._writer is None:
            self._writer = self._index.writer(WRITER_HEAP, WRITER_THREADS)
        return self._writer

    def add(self, turns: Iterable[TurnText]) -> None:
        """Index turns, each replacing any copy of the same seq (a turn delivered again after a
        crash between a commit and the next)."""
        writer = self._writing()
        for turn in turns:
            writer.delete_documents_by_term("seq", turn.seq)
            document = tantivy.Document(kind=_TURN, scope=turn.scope, seq=turn.seq, text=turn.text)
            if turn.session is not None:
                document.add_text("session", turn.session)
            document.add_integer("terms", len(terms(turn.text)))
            document.add_float("at", turn.at)
            writer.add_document(document)

    def delete(self, seqs: Iterable[int]) -> None:
        """Take turns out of the next commit's searches (their terms stay in the files until
        the index is rewritten: `TurnIndex.rewritten`)."""
        writer = self._writing()
        for seq in seqs:
            writer.delete_documents_by_term("seq", seq)

    def forget(self, scope: str) -> None:
        """Take a scope's turns out of the next commit's searches, as `delete`."""
        self._writing().delete_documents_by_term("scope", scope)

    def commit(self, watermark: int) -> None:
        """Publish what was added and deleted, with `watermark`, in one commit."""
        writer = self._writing()
        writer.delete_documents_by_term("kind", _WATERMARK)
        writer.add_document(
            tantivy.Document(kind=_WATERMARK, seq=watermark, version=SCHEMA_VERSION)
        )
        writer.commit()
        self._index.reload()
        self.view = IndexView(self._index.searcher(), self._schema, watermark)

    def settle(self) -> None:
        """Let the writer finish its merges and search what they merged: a catch-up of many
        commits leaves a segment each, and every search pays for each segment until merged."""
        self.close()
        self._index.reload()
        self.view = IndexView(self._index.searcher(), self._schema, self.watermark)

    def close(self) -> None:
        """Let the writer finish its merges and release the directory's lock."""
        if self._writer is not None:
            self._writer.wait_merging_threads()
            self._writer = None
