"""Shared pieces of the reliability suite: the soak factor, interactions, database checks, figures.

Every scenario runs at a small size in `make test`. `FORGED_SOAK=<n>` multiplies its counts by
`n` for a manual soak (for example `FORGED_SOAK=10 make test`); the timeouts grow with it.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

SOAK = max(1, int(os.environ.get("FORGED_SOAK", "1") or 1))  # count multiplier for soak runs


def scaled(count: int) -> int:
    """A scenario's count at the current soak factor."""
    return count * SOAK


def interaction(key: str, scope: str = "user:alice", text: str | None = None) -> dict[str, Any]:
    """A small, valid interaction with client id `key`."""
    return {
        "id": key,
        "scope": scope,
        "session": "chat",
        "messages": [
            {"role": "user", "text": text or f"Turn {key}: shall we keep PostgreSQL here?"},
            {"role": "assistant", "text": f"Yes, PostgreSQL stays for {key}."},
        ],
    }


def query(db: str | Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows of a read-only query against the daemon's database file."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def integrity(db: str | Path) -> str:
    """`PRAGMA integrity_check` of the file: "ok" when SQLite finds nothing wrong."""
    return "; ".join(r for (r,) in query(db, "PRAGMA integrity_check"))


def facts_per_seq(db: str | Path) -> dict[int, int]:
    """How many facts name each seq: the fake LLM writes one per interaction it distils."""
    counts: dict[int, int] = {}
    for first, last in query(db, "SELECT first_seq, last_seq FROM facts"):
        if first == last:  # the fake's fact quotes one interaction, its source
            counts[first] = counts.get(first, 0) + 1
    return counts


def summaries_per_seq(db: str | Path) -> dict[int, int]:
    """How many summaries cover each seq."""
    counts: dict[int, int] = {}
    for first, last in query(db, "SELECT first_seq, last_seq FROM summaries"):
        for seq in range(first, last + 1):
            counts[seq] = counts.get(seq, 0) + 1
    return counts


def memory_kib(pid: int) -> dict[str, int]:
    """VmHWM (peak) and VmRSS (current) of a process, in KiB, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            fields[name] = int(value.split()[0])
    return fields


def record(scenario: str, **figures: Any) -> None:
    """Write a scenario's figures to the test output (shown with `pytest -s` or `-rP`)."""
    text = ", ".join(f"{k}={v}" for k, v in figures.items())
    print(f"[reliability] {scenario}: {text}", file=sys.stderr)
