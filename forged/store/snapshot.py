"""Reads of several statements that answer from one state of the store.

A reader's connection runs each statement on its own (autocommit), so a read of a fact and then
of its trail could see a correction commit between the two and answer a fact that is current
beside the change that retired it. `one_state` holds one snapshot for the block: SQLite's read
transaction (WAL keeps it while the writer goes on), PostgreSQL's repeatable read. Inside a
transaction already (an edit reading what it wrote), that transaction is the state.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from psycopg.pq import TransactionStatus

from forged.store.portable import native

__all__ = ["one_state"]


@contextmanager
def _sqlite_snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN")  # deferred: the snapshot is taken by the block's first read
    try:
        yield
    finally:
        if conn.in_transaction:  # an interrupted read may have ended it
            conn.execute("COMMIT")


@contextmanager
def one_state(conn: Any) -> Iterator[None]:
    """Hold the block's reads on `conn` (either store's, or a portable one) to one snapshot."""
    raw = native(conn)
    if isinstance(raw, sqlite3.Connection):
        if raw.in_transaction:
            yield
        else:
            with _sqlite_snapshot(raw):
                yield
    elif raw.info.transaction_status != TransactionStatus.IDLE:
        yield
    else:
        with raw.transaction():
            raw.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield
