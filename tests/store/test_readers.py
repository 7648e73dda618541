"""Shared readers: a scope holds one reader at a time, so scopes that hammer leave one free;
the log has its own, a read past its budget is stopped, and a query's words past the limit are
named in the answer."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from forged.config import load_config
from forged.errors import QueryTimeout
from forged.store.readers import Readers, within
from forged.store.sqlite import Store
from tests.support.daemons import running_daemon, socket_client, write_config
from tests.support.data import new
from tests.support.fakellm import FakeLLM

# A statement that runs for minutes: counting to a billion, one row at a time.
ENDLESS = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1e9) SELECT count(*) FROM n"


class _Held:
    """Reads that block in their worker threads until released, and count who is in."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.inside: list[str] = []
        self._entered = threading.Condition()

    def call(self, who: str) -> Any:
        def run(conn: object) -> object:
            with self._entered:
                self.inside.append(who)
                self._entered.notify_all()
            self.release.wait(30)
            return conn

        return run

    async def until_inside(self, n: int) -> None:
        """Return once `n` reads are in their threads."""

        def wait() -> None:
            with self._entered:
                self._entered.wait_for(lambda: len(self.inside) >= n, timeout=10)

        await trio.to_thread.run_sync(wait)


async def test_a_scopes_reads_take_one_reader_at_a_time() -> None:
    """Five reads of scope a on three readers: one runs, and a read of scope b runs beside it."""
    readers, held = Readers(["r1", "r2", "r3"]), _Held()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(readers.run, held.call("a"), "a")
            await held.until_inside(1)
            await trio.testing.wait_all_tasks_blocked()
            try:
                assert held.inside == ["a"]
                assert readers.busy() == 1
                assert await readers.run(lambda conn: f"b on {conn}", "b") == "b on r2"
            finally:
                held.release.set()
    assert held.inside == ["a"] * 5
    assert sorted(readers.connections()) == ["r1", "r2", "r3"]


async def test_scopes_that_hammer_leave_a_reader_for_another_scope() -> None:
    """Three scopes each flooding four readers with reads that do not end: each holds one,
    the last stays free, and a read of a fourth scope runs at once beside them."""
    readers, held = Readers(["r1", "r2", "r3", "r4"]), _Held()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for scope in ("a", "b", "c") * 3:
                nursery.start_soon(readers.run, held.call(scope), scope)
            await held.until_inside(3)
            await trio.testing.wait_all_tasks_blocked()
            try:
                assert sorted(held.inside) == ["a", "b", "c"]
                assert await readers.run(lambda conn: f"d on {conn}", "d") == "d on r1"
            finally:
                held.release.set()
    assert sorted(held.inside) == sorted(["a", "b", "c"] * 3)
    assert sorted(readers.connections()) == ["r1", "r2", "r3", "r4"]


async def test_a_freed_reader_goes_first_to_a_scope_not_yet_reading() -> None:
    """Two readers, scope a holding one with a second read waiting, scope b holding the other:
    when b's read ends, the reader goes to scope c, which came last, not to a's second read."""
    readers = Readers(["r1", "r2"])
    a_held, b_held, order = _Held(), _Held(), []

    async def read(scope: str, held: _Held | None) -> None:
        await readers.run(held.call(scope) if held else lambda conn: conn, scope)
        order.append(scope)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read, "a", a_held)
            await a_held.until_inside(1)
            nursery.start_soon(read, "b", b_held)
            await b_held.until_inside(1)
            nursery.start_soon(read, "a", None)  # a's second read: it waits
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(read, "c", None)
            await trio.testing.wait_all_tasks_blocked()
            assert order == []  # every reader is held: c waits too
            b_held.release.set()
            while "c" not in order:
                await trio.testing.wait_all_tasks_blocked()
            assert order == ["b", "c"]
            a_held.release.set()
    assert order == ["b", "c", "a", "a"]


async def test_reads_of_no_scope_take_any_free_reader() -> None:
    """The observers' reads (no scope) use every reader."""
    readers, held = Readers(["r1", "r2"]), _Held()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(readers.run, held.call("observer"))
            await held.until_inside(2)
            assert held.inside == ["observer", "observer"]
            held.release.set()


def test_a_read_past_its_budget_is_stopped() -> None:
    """A statement still running when its budget is spent ends with QueryTimeout, and the
    connection serves the next read in full."""
    conn = sqlite3.connect(":memory:")
    with pytest.raises(
        QueryTimeout,
        match=r"^the query ran past its time budget \(50 ms,"
        r" recall.query_timeout_ms\) and was stopped; ask with fewer or rarer"
        r" words$",
    ):
        within(conn, 0.05, lambda c: c.execute(ENDLESS).fetchone())
    assert within(conn, None, lambda c: c.execute("SELECT 1").fetchone()) == (1,)
    conn.close()


async def test_the_log_is_read_while_every_reader_is_busy(tmp_path: Path) -> None:
    """Feeding observers waits for no search: the log has a connection of its own."""
    store = Store(str(tmp_path / "f.db"), readers=2)
    held = _Held()
    try:
        await store.append([[new("one"), new("two")]])
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for _ in range(2):
                    nursery.start_soon(store.read, held.call("search"))
                await held.until_inside(2)
                assert [i.seq for i in await store.read_log(0, 10)] == [1, 2]
                held.release.set()
    finally:
        store.close()


async def test_a_store_read_past_its_budget_answers_query_timeout(tmp_path: Path) -> None:
    """On the SQLite store, a scope's read with a budget is stopped, and the reader returns."""
    store = Store(str(tmp_path / "f.db"), readers=1)
    try:
        with pytest.raises(QueryTimeout):
            await store.read(lambda c: c.execute(ENDLESS).fetchone(), scope="a", budget=0.05)
        assert await store.read(lambda c: c.execute("SELECT 2").fetchone(), scope="a") == (2,)
    finally:
        store.close()


async def test_words_past_the_limit_are_named_in_the_answer(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """On both stores, a query of more distinct words than `max_query_words` searches the
    first ones; search and context answers name the rest in `dropped_words`, and an ordinary
    query's answer holds no such field."""
    config = load_config(
        write_config(short_tmp, fake_llm.base_url, recall={"max_query_words": 3}), {}
    )
    words = "alpha beta gamma delta epsilon"
    with trio.fail_after(60):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            pushed = {"scope": "s", "messages": [{"role": "user", "text": "epsilon alpha"}]}
            assert (await client.post("/v1/interactions", json=pushed)).status_code == 202
            for path in ("/v1/search", "/v1/context"):
                answer = (await client.get(path, params={"q": words, "scope": "s"})).json()
                assert answer["dropped_words"] == ["delta", "epsilon"], path
                plain = (await client.get(path, params={"q": "alpha", "scope": "s"})).json()
                assert "dropped_words" not in plain, path
