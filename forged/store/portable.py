"""Portable SQL: a statement written once, with `?` and `:name` placeholders, run on SQLite as
it is and on PostgreSQL with psycopg's placeholders.

The statements keep to what both engines read alike; where they differ in a function's name,
SQLite is taught PostgreSQL's (`greatest`, `least`: see `store.sqlite._connect`). Where they
differ in an index, `keyed` says how a statement names its key.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Iterable
from typing import Any

__all__ = ["TEXT_KEY", "Portable", "keyed", "native", "portable", "to_psycopg"]

_NAMED = re.compile(r"(?<![:\w]):(\w+)")  # a `:name` placeholder, not a `::type` cast
TEXT_KEY = "text_key"  # PostgreSQL's function of a text its unique indexes hold (a digest)


@functools.lru_cache(maxsize=256)
def to_psycopg(sql: str) -> str:
    """`?` and `:name` placeholders as psycopg's `%s` and `%(name)s`."""
    return _NAMED.sub(r"%(\1)s", sql.replace("?", "%s"))


class Portable:
    """A psycopg connection that runs portable SQL."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    @property
    def connection(self) -> Any:
        """The psycopg connection it runs on."""
        return self._conn

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self._conn.execute(to_psycopg(sql), params)

    def executemany(self, sql: str, params: Iterable[Any]) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(to_psycopg(sql), list(params))


def portable(conn: Any) -> Any:
    """A connection of either store that runs portable SQL: SQLite's (or one already
    portable) as it is."""
    return conn if isinstance(conn, (sqlite3.Connection, Portable)) else Portable(conn)


def native(conn: Any) -> Any:
    """The store's own connection (SQLite's or psycopg's) beneath a portable one."""
    return conn.connection if isinstance(conn, Portable) else conn


def keyed(sql: Any, text: str) -> str:
    """A text column (or `?`) as the store's unique index holds it: itself on SQLite, its digest
    on PostgreSQL, whose btree rows cannot hold a long text (forged.store.postgres_schema).

    An `ON CONFLICT` names the index by it; a lookup compares by it to use the index.
    """
    return text if isinstance(sql, sqlite3.Connection) else f"{TEXT_KEY}({text})"
