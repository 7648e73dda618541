"""Reading facts and summaries past the last id read, as the embed observer follows them.

Their ids never go back, but on PostgreSQL an id is taken when a row is inserted and seen when
its transaction commits: daemons sharing the store write facts at once (one distils, another
takes a user's correction), a smaller id could commit after a larger one was read, and a reader
past the larger never saw it. Every insert of facts or summaries holds the memory barrier shared
until it commits (a trigger: postgres_schema); `past_ids` holds it alone while it reads, so
every id taken before the read is committed or rolled back when it looks, and every id taken
after is larger than any it sees, as the log's barrier does for seqs (forged.store.postgres).
SQLite has one writer at a time: its ids commit in order. The listings page by id too
(`GET /v1/facts?after=`): a page past a late id would leave it out of every later one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from forged.store.portable import native
from forged.store.postgres_schema import MEMORY_LOCK

__all__ = ["held_alone", "past_ids"]


@contextmanager
def held_alone(conn: Any, lock: tuple[int, int]) -> Iterator[None]:
    """A PostgreSQL transaction holding a barrier's advisory `lock` alone: every write that
    holds it shared (an append, an insert of facts) has committed or rolled back."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", lock)
        yield


@contextmanager
def past_ids(conn: Any) -> Iterator[None]:
    """Hold the block's reads of facts and summaries past an id behind the memory barrier
    (`conn`: either store's, or a portable one)."""
    raw = native(conn)
    if isinstance(raw, sqlite3.Connection):
        yield
        return
    with held_alone(raw, MEMORY_LOCK):
        yield
