"""Recall by meaning: the store's vectors held in memory as sign codes, per scope and type, and
a query's nearest items, their codes' best candidates scored again with the stored vectors.

The index follows the `vectors` table by its ids (never reused), so it sees what any daemon
embedded, on SQLite or PostgreSQL, by reading only what is new before a search. It holds 56
bytes per vector (a million take 56 MB); the stored int8 vectors are read for the candidates
alone. A deleted item's codes stay until a search finds its vector gone from the store (deleted
here, or forgotten by another daemon on a shared store): it is never returned, and its codes
leave then, so that they never take the candidates' places from what is stored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from forged.models import MemoryItem, MemoryType
from forged.recall.fulltext import SCORE, item_rows, memory_item
from forged.recall.query import SearchQuery, conditions
from forged.store.portable import portable
from forged.vectors.codec import CODE_WORDS, decode, sign_codes

__all__ = ["CANDIDATES", "CATCH_UP_ROWS", "DenseIndex", "DenseQuery"]

CANDIDATES = 256  # items per list whose stored vectors are scored, best codes first
CATCH_UP_ROWS = 8192  # vectors read from the store per step of a catch-up
# Times a search asks for candidates again after dropping codes whose vectors are gone: each
# time drops up to CANDIDATES of them, and a search after it goes on where it stopped.
MAX_ROUNDS = 4
_NEW = """SELECT id, item, item_id, scope, vector FROM vectors WHERE id > ? ORDER BY id LIMIT ?"""
_STORED = "SELECT item_id, vector FROM vectors WHERE item = :item AND item_id IN ({ids})"


class _Codes:
    """One scope's codes of one type, in chunks joined when searched."""

    def __init__(self) -> None:
        self.ids: list[npt.NDArray[np.int64]] = []
        self.codes: list[npt.NDArray[np.uint64]] = []

    def add(self, ids: npt.NDArray[np.int64], codes: npt.NDArray[np.uint64]) -> None:
        self.ids.append(ids)
        self.codes.append(codes)

    def joined(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint64]]:
        if len(self.ids) > 1:
            self.ids, self.codes = [np.concatenate(self.ids)], [np.concatenate(self.codes)]
        if not self.ids:
            return np.zeros(0, np.int64), np.zeros((0, CODE_WORDS), np.uint64)
        return self.ids[0], self.codes[0]

    def drop(self, gone: list[int]) -> int:
        """Take out the codes of these ids; return how many went."""
        ids, codes = self.joined()
        kept = ~np.isin(ids, np.array(gone, dtype=np.int64))
        self.ids, self.codes = [ids[kept]], [codes[kept]]
        return int(len(ids) - kept.sum())


def _grouped(
    rows: list[tuple[Any, ...]],
) -> dict[tuple[str, str], tuple[npt.NDArray[np.int64], npt.NDArray[np.uint64]]]:
    """Rows read from the vectors table as codes, by scope and type: (ids, codes) each."""
    codes = sign_codes(decode([bytes(r[4]) for r in rows]))
    groups: dict[tuple[str, str], list[int]] = {}
    for n, (_, item, _, scope, _) in enumerate(rows):
        groups.setdefault((scope, item), []).append(n)
    return {
        key: (np.array([rows[n][2] for n in members], dtype=np.int64), codes[members])
        for key, members in groups.items()
    }


def _named(ids: list[int]) -> tuple[dict[str, int], str]:
    """Ids as named parameters, and the list of their placeholders for an IN (...)."""
    named = {f"i{n}": i for n, i in enumerate(ids)}
    return named, ", ".join(f":{name}" for name in named)


class DenseIndex:
    """The sign codes of every stored vector; thread-safe (searches run in reader threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the codes: held for work in memory alone
        self._reading = threading.Lock()  # one catch-up at a time reads the store
        self._last = 0  # the id of the last vector read from the store
        self._lists: dict[tuple[str, str], _Codes] = {}
        self.size = 0

    def catch_up(self, conn: Any) -> None:
        """Read the vectors stored since the last call. The store is read without holding the
        codes: a forget (called from the event loop) waited for a whole catch-up, seconds at a
        start with a million vectors, and every request with it. Codes of a scope forgotten
        while its vectors were being read leave when a search finds them gone (`_stored`)."""
        sql = portable(conn)
        with self._reading:
            while rows := sql.execute(_NEW, (self._last, CATCH_UP_ROWS)).fetchall():
                self._add(rows)
                self._last = int(rows[-1][0])
                if len(rows) < CATCH_UP_ROWS:
                    break

    def _add(self, rows: list[tuple[Any, ...]]) -> None:
        """Hold the codes of rows read from the vectors table (decoded before the lock)."""
        groups = _grouped(rows)
        with self._lock:
            for key, (ids, codes) in groups.items():
                self._lists.setdefault(key, _Codes()).add(ids, codes)
            self.size += len(rows)

    def forget(self, scope: str) -> None:
        """Drop a forgotten scope's codes."""
        with self._lock:
            for key in [k for k in self._lists if k[0] == scope]:
                self.size -= sum(len(i) for i in self._lists.pop(key).ids)

    def _drop(self, scope: str, table: str, gone: list[int]) -> None:
        """Drop the codes of items whose vectors the store no longer holds (ids are never
        reused: they are gone for good)."""
        with self._lock:
            if (codes := self._lists.get((scope, table))) is not None:
                self.size -= codes.drop(gone)

    def _candidates(self, scope: str, table: str, query: npt.NDArray[np.float32]) -> list[int]:
        """The ids whose codes are nearest the query's, at most CANDIDATES, nearest first."""
        with self._lock:
            codes = self._lists.get((scope, table))
            if codes is None:
                return []
            ids, words = codes.joined()
        distance = np.bitwise_count(words ^ sign_codes(query[None, :])).sum(axis=1)
        if len(ids) > CANDIDATES:
            best = np.argpartition(distance, CANDIDATES)[:CANDIDATES]
            ids, distance = ids[best], distance[best]
        return [int(i) for i in ids[np.argsort(distance, kind="stable")]]

    def _stored(
        self, conn: Any, table: str, scope: str, query: npt.NDArray[np.float32]
    ) -> dict[int, bytes]:
        """The stored vectors of the candidates, by id. A candidate whose vector is gone (its
        item deleted since its codes were read) leaves the index, and the candidates are asked
        again: a scope's deleted items, nearest the query, took every place, and what the store
        holds was never found by meaning."""
        sql = portable(conn)
        stored: dict[int, bytes] = {}
        for _ in range(MAX_ROUNDS):
            candidates = [c for c in self._candidates(scope, table, query) if c not in stored]
            if not candidates:
                break
            named, ids = _named(candidates)
            found = sql.execute(_STORED.format(ids=ids), {"item": table, **named}).fetchall()
            stored |= {int(k): bytes(v) for k, v in found}
            if not (gone := [c for c in candidates if c not in stored]):
                break
            self._drop(scope, table, gone)
        return stored

    def ranked(
        self,
        conn: Any,
        table: MemoryType,
        query: SearchQuery,
        vector: npt.NDArray[np.float32],
    ) -> list[MemoryItem]:
        """The type's items nearest the query vector that pass the query's filters, best
        first, at most `query.limit`, each scored by its cosine similarity."""
        stored = self._stored(conn, table, query.scope, vector)
        if not stored:
            return []
        sql, (named, ids) = portable(conn), _named(list(stored))
        keys = list(stored)
        similarity = decode([stored[k] for k in keys]) @ vector
        params: dict[str, Any] = {"scope": query.scope, **named}
        select, key = item_rows(table)
        where = f" WHERE {key} IN ({ids}) AND {key.split('.')[0]}.scope = :scope"
        rows = sql.execute(select + where + conditions(table, query, params), params).fetchall()
        score = dict(zip(keys, similarity.tolist(), strict=True))
        found = [r for r in rows if r[0] in score]
        found.sort(key=lambda r: -score[r[0]])
        return [
            memory_item(table, (*r[:SCORE], score[r[0]], *r[SCORE + 1 :]))
            for r in found[: query.limit]
        ]


class DenseQuery:
    """A search's side by meaning: the index and the query's vector."""

    def __init__(self, index: DenseIndex, vector: npt.NDArray[np.float32]) -> None:
        self.index = index
        self.vector = vector

    def lists(self, conn: Any, query: SearchQuery) -> Callable[[MemoryType], list[MemoryItem]]:
        """What ranks each type by meaning for this search, once the index has caught up."""
        self.index.catch_up(conn)
        return lambda table: self.index.ranked(conn, table, query, self.vector)
