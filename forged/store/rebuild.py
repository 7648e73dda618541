"""A database rebuilt from the rows of an untrusted one: only data crosses.

Restore never puts a file it did not write in place of the database. It creates the schema of
the file's version afresh, with the migrations, and copies into it the rows of the tables that
schema holds, by the column names that schema gives. Nothing else of the file is read or kept:
not its triggers, views or extra tables, whatever their names (a trigger written into
`sqlite_master` under a reserved name included), not its full-text indexes, whose pages may be
anything, nor what forged derives from the rows. The fresh schema's own triggers index each row
as it arrives, so every index is made from the data alone, and the copy is checked as a fresh
database is.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from forged.errors import BackupError
from forged.store.sqlite_schema import migrate

__all__ = ["BATCH_ROWS", "DERIVED", "MAX_COUNTER", "rebuild_from", "untrusted"]

BATCH_ROWS = 1000  # rows read and written at a time: memory stays flat, whatever the file holds
DERIVED = frozenset({"interaction_blocks"})  # filled by the fresh schema's triggers, not copied
MAX_COUNTER = 2**53  # an id counter above this would exhaust the ids: refused as not a count
_TABLES = """SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table'
    AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name != 'schema_migrations'"""
_IS_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
_AUTOINCREMENT = (
    "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%AUTOINCREMENT%'"
)


def untrusted(path: Path) -> sqlite3.Connection:
    """`path` opened to read only, with nothing of its schema trusted to run with side effects."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    conn.execute("PRAGMA trusted_schema = OFF")
    conn.execute("PRAGMA query_only = ON")
    return conn


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [name for (name,) in conn.execute("SELECT name FROM pragma_table_info(?)", (table,))]


def _copy_table(
    source: sqlite3.Connection, fresh: sqlite3.Connection, table: str, path: Path
) -> None:
    """The rows of `table`, by the fresh schema's columns, batch by batch."""
    columns = _columns(fresh, table)
    if source.execute(_IS_TABLE, (table,)).fetchone() is None:
        raise BackupError(f"{path}: {table} is not a table")
    if sorted(_columns(source, table)) != sorted(columns):
        raise BackupError(f"{path}: the columns of {table} are not those its schema version makes")
    names = ", ".join(f'"{c}"' for c in columns)
    rows = source.execute(f'SELECT {names} FROM main."{table}"')
    insert = f'INSERT INTO "{table}" ({names}) VALUES ({", ".join("?" * len(columns))})'
    while batch := rows.fetchmany(BATCH_ROWS):
        fresh.executemany(insert, batch)


def _copy_counters(source: sqlite3.Connection, fresh: sqlite3.Connection, path: Path) -> None:
    """The AUTOINCREMENT high marks, so an id once used is never used again."""
    for (table,) in fresh.execute(_AUTOINCREMENT).fetchall():
        row = source.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchone()
        if row is None:
            continue
        (seq,) = row
        if not isinstance(seq, int) or not 0 <= seq <= MAX_COUNTER:
            raise BackupError(f"{path}: the id counter of {table} is {seq!r}, not a count")
        fresh.execute(
            "INSERT INTO sqlite_sequence SELECT ?, 0 WHERE NOT EXISTS"
            " (SELECT 1 FROM sqlite_sequence WHERE name = ?)",
            (table, table),
        )
        fresh.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (seq, table))


def _check_fresh(fresh: sqlite3.Connection, path: Path) -> None:
    """The checks a fresh database passes: the file's integrity and each full-text index's."""
    problems = [p for (p,) in fresh.execute("PRAGMA integrity_check")]
    indexes = "SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'virtual'"
    try:
        for (fts,) in fresh.execute(indexes).fetchall():
            fresh.execute(f'INSERT INTO "{fts}" ("{fts}") VALUES (\'integrity-check\')')
    except sqlite3.DatabaseError as exc:
        problems.append(str(exc))
    if problems != ["ok"]:
        raise BackupError(f"{path}: its rows do not make a sound database: {problems[:3]}")


def rebuild_from(source: sqlite3.Connection, partial: Path, version: int, path: Path) -> None:
    """Write into the empty file `partial` the schema `version` makes and the rows `source`
    holds in it, indexed anew; `path` names the source in refusals."""
    fresh = sqlite3.connect(partial, isolation_level=None)
    try:
        migrate(fresh, version)
        fresh.execute("BEGIN IMMEDIATE")
        for (table,) in fresh.execute(_TABLES).fetchall():
            if table not in DERIVED:
                _copy_table(source, fresh, table, path)
        _copy_counters(source, fresh, path)
        fresh.execute("COMMIT")
        _check_fresh(fresh, path)
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{path}: its rows do not fit the schema: {exc}") from exc
    finally:
        fresh.close()
