"""Numbered migrations, as both schemas (forged.store.sqlite_schema, forged.store.postgres_schema) record and check them."""

from __future__ import annotations

from typing import Any

from forged.errors import StoreError

__all__ = ["applied", "check"]

_RECORD = """
    CREATE TABLE IF NOT EXISTS schema_migrations
        (version integer PRIMARY KEY, name text NOT NULL, applied_at text NOT NULL)
"""


def applied(conn: Any) -> list[int]:
    """The versions recorded as applied, in order (the record is made on first use)."""
    conn.execute(_RECORD)
    return [v for (v,) in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]


def check(versions: list[int], known: int) -> None:
    """Raise StoreError unless `versions` run from 1 without a gap and this forged knows them."""
    if versions != list(range(1, len(versions) + 1)):
        raise StoreError(f"schema_migrations is inconsistent: versions {versions}")
    if len(versions) > known:
        raise StoreError(
            f"the database is at schema version {len(versions)}, newer than this forged"
            f" knows ({known}); upgrade forged"
        )
