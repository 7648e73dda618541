"""Shared readers: a scope holds one reader at a time and a client all but one, so scopes or a
client that hammer leave one free; the log has its own, a read past its budget is stopped, and a
query's words past the limit are named in the answer."""

from __future__ import annotations

import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from forged.config import load_config
from forged.errors import QueryTimeout
from forged.recall.engine import Recall
from forged.store.readers import Readers, reading_for, within
from forged.store.sqlite import Store
from tests.conftest import StoreOpener
from tests.support.daemons import running_daemon, socket_client, write_config
from tests.support.data import new
from tests.support.fakellm import FakeLLM

# The scopes one client floods through the socket: more than the daemon has readers (4).
FLOODED = ("user:1", "user:2", "user:3", "user:4", "user:5")
FLOODING_CONNECTIONS = 10  # connections it floods them over, two a scope
# A statement that runs for minutes: counting to a billion, one row at a time.
ENDLESS = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1e9) SELECT count(*) FROM n"


class _Held:
    """Reads that block in their worker threads until released, and count who is in."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.inside: list[str] = []
        self._entered = threading.Condition()

    def hold(self, who: str) -> None:
        """Count `who` in, then block until released (in a worker thread)."""
        with self._entered:
            self.inside.append(who)
            self._entered.notify_all()
        self.release.wait(30)

    def call(self, who: str) -> Any:
        def run(conn: object) -> object:
            self.hold(who)
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


async def test_one_client_reading_many_scopes_leaves_a_reader_for_another() -> None:
    """One client flooding five scopes on four readers holds three of them, whatever the
    scopes; another client's read runs at once on the last."""
    readers, held = Readers(["r1", "r2", "r3", "r4"]), _Held()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for scope in ("a", "b", "c", "d", "e") * 2:
                nursery.start_soon(readers.run, held.call(scope), scope, "agent")
            await held.until_inside(3)
            await trio.testing.wait_all_tasks_blocked()
            try:
                assert len(set(held.inside)) == len(held.inside) == 3
                assert readers.busy() == 3
                assert await readers.run(lambda conn: f"cli on {conn}", "f", "cli") == "cli on r1"
            finally:
                held.release.set()
    assert sorted(held.inside) == sorted("abcde" * 2)
    assert sorted(readers.connections()) == ["r1", "r2", "r3", "r4"]


async def test_a_clients_reads_of_no_scope_leave_a_reader_for_the_observers() -> None:
    """A client's listings (reads of no scope) hold all readers but one too; forged's own
    reads (no client) find it."""
    readers, held = Readers(["r1", "r2", "r3"]), _Held()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(readers.run, held.call("listing"), None, "browser")
            await held.until_inside(2)
            await trio.testing.wait_all_tasks_blocked()
            try:
                assert held.inside == ["listing"] * 2
                assert await readers.run(lambda conn: f"observer on {conn}") == "observer on r1"
            finally:
                held.release.set()
    assert held.inside == ["listing"] * 5


async def test_a_clients_turns_go_to_scopes_that_can_read() -> None:
    """A client's queue in one scope does not spend its share: its read of a second scope
    runs beside the first scope's while the rest of that scope waits its turn."""
    readers, held = Readers(["r1", "r2", "r3", "r4"]), _Held()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(readers.run, held.call("a"), "a", "agent")
            await held.until_inside(1)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(readers.run, held.call("b"), "b", "agent")
            await held.until_inside(2)
            await trio.testing.wait_all_tasks_blocked()
            assert held.inside == ["a", "b"]
            held.release.set()
    assert sorted(held.inside) == ["a"] * 4 + ["b"]


async def test_a_client_alone_on_one_reader_still_reads() -> None:
    """With a single reader a client's share is that reader, not none."""
    readers = Readers(["r1"])
    with trio.fail_after(10):
        assert await readers.run(lambda conn: conn, "a", "agent") == "r1"


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


async def test_a_clients_listings_leave_a_reader_for_another_client(
    open_store: StoreOpener,
) -> None:
    """On both stores, one client's reads of no scope (its listings) hold three of the four
    readers; another client's listing finds the last, and forged's own read (no client) runs."""
    store, held = open_store(), _Held()

    async def listing(client: str, call: Any) -> Any:
        with reading_for(client):
            return await store.read(call)

    def one(conn: Any) -> Any:
        return conn.execute("SELECT 1").fetchone()

    try:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for _ in range(6):
                    nursery.start_soon(listing, "agent", held.call("agent"))
                await held.until_inside(3)
                await trio.testing.wait_all_tasks_blocked()
                try:
                    assert held.inside == ["agent"] * 3
                    assert tuple(await listing("cli", one)) == (1,)
                    assert tuple(await store.read(one)) == (1,)
                finally:
                    held.release.set()
        assert held.inside == ["agent"] * 6
    finally:
        store.close()


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


async def test_one_process_over_many_connections_leaves_a_reader_for_another(
    short_tmp: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On both stores, through the socket: this process searches five scopes over ten
    connections, each search held in its reader until released; it holds three of the four
    readers, and `forged search` in another process finds its one document in a sixth scope."""
    held, search = _Held(), Recall._found

    def gated(recall: Recall, conn: Any, query: Any, *rest: Any) -> Any:
        if query.scope in FLOODED:
            held.hold(query.scope)
        return search(recall, conn, query, *rest)

    monkeypatch.setattr(Recall, "_found", gated)
    config = load_config(write_config(short_tmp, fake_llm.base_url, distill={"enabled": False}), {})
    answers: list[int] = []

    async def flood(scope: str) -> None:
        async with socket_client(config.server.socket) as client:
            found = await client.get("/v1/search", params={"q": "pilot", "scope": scope})
            answers.append(found.status_code)

    command = [sys.executable, "-m", "forged", "search", "pilot", "--scope", "other", "--json"]
    with trio.fail_after(60):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            for scope in (*FLOODED, "other"):
                turn = {"scope": scope, "messages": [{"role": "user", "text": f"pilot of {scope}"}]}
                assert (await client.post("/v1/interactions", json=turn)).status_code == 202
            async with trio.open_nursery() as nursery:
                for n in range(FLOODING_CONNECTIONS):
                    nursery.start_soon(flood, FLOODED[n % len(FLOODED)])
                await held.until_inside(3)
                await trio.testing.wait_all_tasks_blocked()  # every search has reached a reader
                try:
                    assert len(set(held.inside)) == len(held.inside) == 3
                    other = await trio.run_process(
                        [*command, "--socket", config.server.socket], capture_stdout=True
                    )
                finally:
                    held.release.set()
    assert answers == [200] * FLOODING_CONNECTIONS
    results = msgspec.json.decode(other.stdout)
    assert [r["text"] for r in results if r["type"] == "interaction"] == ["user: pilot of other"]
