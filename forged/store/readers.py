"""Shared readers: a few database connections that reads take in turn, one at a time for each
scope and never all of them for one client, a client's read held to a time budget.

WAL lets SQLite readers run beside each other and beside the writer, and PostgreSQL serves one
query per connection; either way a read waits only for a free connection. A scope's reads take
one connection at a time, in the order they came: clients that flood one, two or three scopes
with costly queries hold one connection each, and a read of any other scope finds one free as
long as fewer scopes than connections are reading (four by default). Once a scope's turn
comes, it waits only behind the first reads of other scopes, never behind a flooding scope's
queue. A scope's reads gain no parallelism this way; on the two or four cores forged is sized
for, that is what keeps one scope from slowing every other.

A client (the process at the other end of the socket, known by its credentials however many
connections it opens) holds at most all connections but one, whatever scopes it reads: an
agent runtime serving many users' scopes from its threads leaves one for the CLI, the MCP
server or another runtime (though a read of a scope it has queued reads waits behind them,
and processes that work together count as several clients). Reads for no client (the observers' bookkeeping) are not counted
against any, and take any free connection when they name no scope either.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any, Generic, NamedTuple, TypeVar

import trio

from forged.errors import QueryTimeout

__all__ = ["CHECK_STEPS", "Client", "ReadWaits", "Readers", "asking", "reading_for", "within"]

C = TypeVar("C")
T = TypeVar("T")

CHECK_STEPS = 10_000  # SQLite VM steps between two looks at a read's deadline


class Client(NamedTuple):
    """A process at the other end of the socket, by its credentials (SO_PEERCRED)."""

    pid: int
    uid: int


# Who the reads of the running task are made for: set by the server in the task that answers a
# connection (trio gives each task a copy of its parent's context, so it reaches every read made
# while answering, and no observer's). Implicit on purpose: a request reaches the readers
# through recall, listings, edits and status alike, and none of them should have to carry it.
_CLIENT: ContextVar[Hashable | None] = ContextVar("forged_read_client", default=None)


@contextmanager
def reading_for(client: Hashable) -> Iterator[None]:
    """Count the reads made in this task (and tasks it starts) against `client`."""
    token = _CLIENT.set(client)
    try:
        yield
    finally:
        _CLIENT.reset(token)


class ReadWaits(NamedTuple):
    """Reads since the start, and how many of them waited for a connection, how long in all."""

    reads: int = 0
    waited: int = 0
    wait_s: float = 0.0


class Readers(Generic[C]):
    """Connections shared by reads; a scope's reads hold one at a time, a client's all but one."""

    def __init__(self, connections: list[C]) -> None:
        self.size = len(connections)
        self.per_client = max(1, self.size - 1)  # one left for others (with one, it is the one)
        self._free = list(connections)
        self._limiter = trio.CapacityLimiter(self.size)
        self._lanes: dict[Hashable, trio.CapacityLimiter] = {}  # scopes with reads in flight
        self._shares: dict[Hashable, trio.CapacityLimiter] = {}  # clients with reads in flight
        self.waits = ReadWaits()

    def _all_taken(self, scope: str | None, client: Hashable | None) -> bool:
        """Whether a read would wait now: no connection free, or none for its scope or client."""
        turns = (self._lanes.get(scope), self._shares.get(client))
        return self._limiter.available_tokens < 1 or any(
            turn is not None and turn.available_tokens < 1 for turn in turns
        )

    @staticmethod
    @asynccontextmanager
    async def _turn(
        turns: dict[Hashable, trio.CapacityLimiter], key: Hashable | None, size: int
    ) -> AsyncIterator[None]:
        """Hold one of `key`'s `size` turns for the block (none is needed for no key)."""
        if key is None:
            yield
            return
        turn = turns.setdefault(key, trio.CapacityLimiter(size))
        try:
            async with turn:
                yield
        finally:
            stats = turn.statistics()
            if not stats.borrowed_tokens and not stats.tasks_waiting:
                turns.pop(key, None)  # an idle scope or client costs nothing

    async def run(
        self, call: Callable[[C], T], scope: str | None = None, client: Hashable | None = None
    ) -> T:
        """`call(connection)` in a worker thread, once a connection is free for `scope` and
        `client`: the scope's turn first, so a client's turns go to reads that can run."""
        waits, started = self._all_taken(scope, client), time.monotonic()
        async with (
            self._turn(self._lanes, scope, 1),
            self._turn(self._shares, client, self.per_client),
            self._limiter,
        ):
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


def asking() -> Hashable | None:
    """The client the running task reads for (None: forged's own work)."""
    return _CLIENT.get()


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
