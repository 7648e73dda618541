"""Recall: search and the context block on SQLite (FTS5) or PostgreSQL (tsvector), their
ranking, fusion and packing, listings, and the dates a query names; read-only SQL."""
