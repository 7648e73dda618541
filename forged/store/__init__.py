"""The store: what any store offers (backend) and its two engines, SQLite and PostgreSQL, with
their schemas, migrations, portable SQL, retiring of facts and backups; the SQL writers."""

from __future__ import annotations

from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "BLOCK_BITS": "sqlite_schema",
    "FACT_COLUMNS": "audit",
    "MAX_READ_BYTES": "common",
    "Backend": "backend",
    "BatchOutcome": "records",
    "CJK_RUN": "cjk",
    "Client": "readers",
    "DeadLetter": "records",
    "DistillRun": "records",
    "NewInteraction": "records",
    "Portable": "portable",
    "ScopeResult": "records",
    "StoredVector": "records",
    "TEXT_SEARCH": "postgres_schema",
    "VectorBatch": "records",
    "backup_target": "backup",
    "check_store": "backend",
    "cjk_grams": "cjk",
    "consolidation": None,
    "fact_audit": "audit",
    "fitting": "common",
    "one_state": "snapshot",
    "open_store": "backend",
    "past_ids": "cursors",
    "portable": "portable",
    "reading_for": "readers",
    "restore_backup": "backup",
    "stored_fact": "audit",
    "take_backup": "backup",
    "to_psycopg": "portable",
}
__all__ = [
    "BLOCK_BITS",
    "CJK_RUN",
    "FACT_COLUMNS",
    "MAX_READ_BYTES",
    "TEXT_SEARCH",
    "Backend",
    "BatchOutcome",
    "Client",
    "DeadLetter",
    "DistillRun",
    "NewInteraction",
    "Portable",
    "ScopeResult",
    "StoredVector",
    "VectorBatch",
    "backup_target",
    "check_store",
    "cjk_grams",
    "consolidation",
    "fact_audit",
    "fitting",
    "one_state",
    "open_store",
    "past_ids",
    "portable",
    "reading_for",
    "restore_backup",
    "stored_fact",
    "take_backup",
    "to_psycopg",
]
__getattr__ = lazy_surface(__name__, _SURFACE)
