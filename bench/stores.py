"""Large stores written straight with SQLite (through forged's schema), fast, and cached by size."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import Any

import msgspec

from bench.corpus import NAMES, Turn, interaction, log_row, sentence
from bench.sizes import Context
from forged.models import normalise
from forged.store.sqlite import Store
from forged.store.sqlite_schema import FILL_BLOCKS, MIGRATIONS, register_functions

CHUNK = 10_000  # rows per executemany
ROW_OVERHEAD = 340  # bytes an interaction row costs besides its text (columns, indexes), measured
SCOPES = 100  # facts spread over this many scopes; queries name one
FACTS_PER_SUMMARY = 10  # one summary row per this many facts
SPAN_DAYS = 365  # facts are dated over the last year, so recency decay has work to do
BARE = "bench_bare_fts"  # every text of a recall store in a plain full-text table: the baseline
BARE_TOKENIZER = "tokenize='porter unicode61 remove_diacritics 2'"  # the one forged's use
SCHEMA = hashlib.sha256("".join(sql for _, sql in MIGRATIONS).encode()).hexdigest()[:10]
_INSERT_LOG = """INSERT INTO interactions
    (client_id, scope, session, timestamp, received_at, tokens, messages, metadata)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)"""


def _fresh(path: Path) -> sqlite3.Connection:
    """A new database with forged's schema (its own migrations), opened for a bulk load."""
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        p.unlink(missing_ok=True)
    Store(str(path)).close()
    conn = sqlite3.connect(path, isolation_level=None)
    register_functions(conn)  # the full-text triggers call them
    conn.execute("PRAGMA synchronous = OFF")  # a bulk load: durability comes from the final sync
    return conn


def _load(conn: sqlite3.Connection, sql: str, rows: Iterator[tuple[Any, ...]]) -> None:
    conn.execute("BEGIN")
    while chunk := list(islice(rows, CHUNK)):
        conn.executemany(sql, chunk)
    conn.execute("COMMIT")


def _finish(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 1e6


def directory_mb(directory: Path) -> float:
    """The size of every file under `directory`, in MB."""
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file()) / 1e6


def bare_turn_index(path: Path, work: Path) -> tuple[float, float]:
    """Seconds to build a bare FTS5 index of the store's turns (forged's tokenizer) in a file
    of its own, and that file's size in MB: the turn index's baselines."""
    out = work / "bare-fts.db"
    out.unlink(missing_ok=True)
    conn = sqlite3.connect(out, isolation_level=None)
    register_functions(conn)
    conn.execute(f"ATTACH 'file:{path}?mode=ro' AS store")
    started = time.perf_counter()
    conn.executescript(f"""
        BEGIN;
        CREATE VIRTUAL TABLE bare USING fts5(text, {BARE_TOKENIZER});
        INSERT INTO bare (rowid, text) SELECT seq, text FROM store.interactions_text;
        COMMIT;
    """)
    seconds = time.perf_counter() - started
    conn.close()
    size = out.stat().st_size / 1e6
    out.unlink()
    return seconds, size


def build_backlog(path: Path, corpus: list[Turn], n: int, target_bytes: int) -> None:
    """`n` undistilled interactions of about `target_bytes / n` bytes each."""
    conn = _fresh(path)
    per_row = max(1, target_bytes // n - ROW_OVERHEAD)

    def rows() -> Iterator[tuple[Any, ...]]:
        for i in range(n):
            item = interaction(i, corpus[i % len(corpus)], "backlog")
            text = item["messages"][0]["text"]
            while len(text) < per_row:  # pad with the following turns, as a long message would be
                text += " " + corpus[(i + len(text)) % len(corpus)].text
            item["messages"][0]["text"] = text[:per_row]
            yield log_row(item)

    _load(conn, _INSERT_LOG, rows())
    _finish(conn)


def _fact_rows(n: int, now: datetime) -> Iterator[tuple[Any, ...]]:
    for i in range(n):
        text, kind = sentence(i)
        created = (now - timedelta(days=SPAN_DAYS * (n - i) / n)).isoformat(timespec="milliseconds")
        created = created.replace("+00:00", "Z")
        yield (
            kind,
            text,
            normalise(text),
            f"user:{i % SCOPES}",
            None,
            f"b{i // 32}",
            i + 1,
            i + 1,
            created,
            created,
            created,
            created,
        )


def _summary_rows(n: int, now: datetime) -> Iterator[tuple[Any, ...]]:
    for i in range(0, n, FACTS_PER_SUMMARY):
        text = " ".join(sentence(i + j)[0] for j in range(3))
        created = now.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        yield (
            "distill",
            f"b{i // 32}",
            f"user:{i % SCOPES}",
            None,
            text,
            i + 1,
            i + 1,
            created,
            created,
            created,
        )


def _without_triggers(conn: sqlite3.Connection) -> list[str]:
    """Drop the schema's triggers for a bulk load; return the SQL that recreates them."""
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _ in triggers:
        conn.execute(f'DROP TRIGGER "{name}"')
    return [sql for _, sql in triggers]


def _reindex(conn: sqlite3.Connection, triggers: list[str], indexes: tuple[str, ...]) -> None:
    """Rebuild the loaded tables' full-text indexes and interaction blocks at once, then restore
    the triggers."""
    conn.execute("BEGIN")
    for name in indexes:
        conn.execute(f'INSERT INTO "{name}" ("{name}") VALUES (\'rebuild\')')
    conn.execute(FILL_BLOCKS)
    for sql in triggers:
        conn.execute(sql)
    conn.execute("COMMIT")


def _interaction_rows(n: int, now: datetime) -> Iterator[tuple[Any, ...]]:
    for i in range(n):
        at = (now - timedelta(days=SPAN_DAYS * (n - i) / n)).isoformat(timespec="milliseconds")
        at = at.replace("+00:00", "Z")
        said = [{"role": "user", "name": NAMES[i % len(NAMES)], "text": sentence(n + i)[0]}]
        yield (f"r{i}", f"user:{i % SCOPES}", None, at, at, 20, msgspec.json.encode(said), None)


def build_facts(path: Path, n: int) -> None:
    """`n` facts, a summary per ten and `n` interactions over `SCOPES` scopes, indexed as
    forged's schema says, and the same texts in a bare full-text table (`BARE`).

    The full-text indexes are built once after the load rather than row by row through the
    schema's triggers: the same index, two to three times faster.
    """
    conn = _fresh(path)
    triggers = _without_triggers(conn)
    now = datetime.now(UTC)
    _load(
        conn,
        "INSERT INTO facts (kind, text, norm, scope, session, batch_id, first_seq, last_seq,"
        " first_at, last_at, created_at, last_seen_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        _fact_rows(n, now),
    )
    _load(
        conn,
        "INSERT INTO summaries (observer, batch_id, scope, session, text, first_seq,"
        " last_seq, first_at, last_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        _summary_rows(n, now),
    )
    _load(conn, _INSERT_LOG, _interaction_rows(n, now))
    _reindex(conn, triggers, ("facts_fts", "summaries_fts"))
    conn.executescript(f"""
        BEGIN;
        INSERT INTO interactions_fts (rowid, text, scope) SELECT seq, text, scope
            FROM interactions_text;
        CREATE VIRTUAL TABLE {BARE} USING fts5(text, content='', {BARE_TOKENIZER});
        INSERT INTO {BARE} (text) SELECT text FROM facts UNION ALL SELECT text FROM summaries
            UNION ALL SELECT text FROM interactions_text;
        COMMIT;
    """)
    _finish(conn)


class Built(msgspec.Struct):
    """A cached store and what building it cost."""

    path: str
    seconds: float
    mb: float


def cached(cache: Path, name: str, build: Any, *args: Any) -> Built:
    """Build `name` once per schema into `cache`; later runs reuse it with its build figures."""
    path = cache / f"{name}-{SCHEMA}.db"
    record = path.with_suffix(".json")
    if path.exists() and record.exists():
        return msgspec.json.decode(record.read_bytes(), type=Built)
    cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    build(path, *args)
    built = Built(str(path), time.perf_counter() - started, size_mb(path))
    record.write_text(json.dumps(msgspec.to_builtins(built)))
    return built


def backlog_store(ctx: Context, corpus: list[Turn]) -> Built:
    """The cached store of `ctx.size.backlog` waiting interactions (memory and start share it)."""
    size = ctx.size
    return cached(
        ctx.cache,
        f"backlog-{size.backlog}",
        build_backlog,
        corpus,
        size.backlog,
        size.backlog_bytes,
    )
