"""Shared readers: a few database connections that reads take in turn, one at a time for each
scope, a client's read held to a time budget.

WAL lets SQLite readers run beside each other and beside the writer, and PostgreSQL serves one
query per connection; either way a read waits only for a free connection. A scope's reads take
one connection at a time, in the order they came: clients that flood one, two or three scopes
with costly queries hold one connection each, and a read of any other scope finds one free as
long as fewer scopes than connections are reading (four by default). Once a scope's turn
comes, it waits only behind the first reads of other scopes, never behind a flooding scope's
queue. A scope's reads gain no parallelism this way; on the two or four cores forged is sized
for, that is what keeps one scope from slowing every other. Reads for no scope (the observers'
bookkeeping) take any free connection.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Generic, NamedTuple, TypeVar

import trio

from forged.errors import QueryTimeout

__all__ = ["CHECK_STEPS", "ReadWaits", "Readers", "within"]

C = TypeVar("C")
T = TypeVar("T")

CHECK_STEPS = 10_000  # SQLite VM steps between two looks at a read's deadline


class ReadWaits(NamedTuple):
    """Reads since the start, and how many of them waited for a connection, how long in all."""

    reads: int = 0
    waited: int = 0
    wait_s: float = 0.0


class Readers(Generic[C]):
    """Connections shared by reads; a scope's reads hold one at a time."""

    def __init__(self, connections: list[C]) -> None:
        self.size = len(connections)
        self._free = list(connections)
        self._limiter = trio.CapacityLimiter(self.size)
        self._lanes: dict[str, trio.CapacityLimiter] = {}  # scopes with reads in flight
        self.waits = ReadWaits()

    def _all_taken(self, scope: str | None) -> bool:
        """Whether a read for `scope` would wait now: no connection free, or none for it."""
        lane = self._lanes.get(scope) if scope is not None else None
        return self._limiter.available_tokens < 1 or (
            lane is not None and lane.available_tokens < 1
        )

    @asynccontextmanager
    async def _lane(self, scope: str | None) -> AsyncIterator[None]:
        """Hold the scope's turn for the block (none is needed for no scope)."""
        if scope is None:
            yield
            return
        lane = self._lanes.setdefault(scope, trio.CapacityLimiter(1))
        try:
            async with lane:
                yield
        finally:
            stats = lane.statistics()
            if not stats.borrowed_tokens and not stats.tasks_waiting:
                self._lanes.pop(scope, None)  # an idle scope costs nothing

    async def run(self, call: Callable[[C], T], scope: str | None = None) -> T:
        """`call(connection)` in a worker thread, once a connection is free for `scope`."""
        waits, started = self._all_taken(scope), time.monotonic()
        async with self._lane(scope), self._limiter:
            reads, waited, wait_s = self.waits
            if waits:
                waited, wait_s = waited + 1, wait_s + time.monotonic() - started
            self.waits = ReadWaits(reads + 1, waited, wait_s)
            conn = self._free.pop()
            try:
                return await trio.to_thread.run_sync(call, conn)
            finally:  # the thread has finished: cancellation waits for it
                self._free.append(conn)

    def busy(self) -> int:
        """How many connections reads hold now."""
        return int(self._limiter.borrowed_tokens)

    def connections(self) -> list[C]:
        """The connections not in use (all of them once no read is in flight)."""
        return list(self._free)


def within(conn: sqlite3.Connection, budget: float | None, fn: Callable[..., T], *args: Any) -> T:
    """`fn(conn, *args)`, interrupted once it has run `budget` seconds (QueryTimeout)."""
    if budget is None:
        return fn(conn, *args)
    deadline = time.monotonic() + budget
    conn.set_progress_handler(lambda: time.monotonic() > deadline, CHECK_STEPS)
    try:
        return fn(conn, *args)
    except sqlite3.OperationalError as exc:
        if time.monotonic() > deadline and "interrupt" in str(exc):
            raise QueryTimeout(budget) from exc
        raise
    finally:
        conn.set_progress_handler(None, 0)
