"""Many daemons, one PostgreSQL memory: shared log, observer leases, out-of-order commits, restarts."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import psycopg
import pytest
import trio

from forged.config import StoreConfig, load_config
from forged.consolidate.observer import NAME
from forged.embed.observer import EmbedObserver
from forged.errors import QueryTimeout, StoreError
from forged.hub import Hub
from forged.models import ConsolidationChange, ConsolidationRun, Fact, NewFact, Usage
from forged.recall.listing import Page
from forged.recall.postgres import list_facts
from forged.store import edits
from forged.store.portable import portable
from forged.store.postgres import (
    _INSERT_INTERACTION,
    LEASE_CLASS,
    LOG_LOCK,
    PostgresStore,
    _key,
)
from forged.store.postgres_schema import MIGRATIONS as PG_MIGRATIONS
from forged.store.records import BatchOutcome, ScopeResult
from forged.timestamps import now
from tests.embed.test_observer import CONFIG as EMBED
from tests.embed.test_observer import _until
from tests.support import daemons
from tests.support.daemons import (
    DaemonProcess,
    running_daemon,
    socket_client,
    wait_for_watermark,
    write_config,
)
from tests.support.data import facts_per_seq, interaction, new, rows
from tests.support.fakellm import FakeLLM
from tests.support.postgres import Server

LLM_LATENCY = 0.05  # seconds per LLM call, so that kills land mid-batch
KILLS = 6  # SIGKILLs of the daemon holding the distill lease
KILL_AFTER = (0.2, 0.8)  # seconds between kills, uniformly drawn
SEED = 20261130

pytestmark = pytest.mark.integration


@pytest.fixture
def shared(postgres: Server) -> Iterator[Path]:
    """A short directory for sockets, and a fresh database every daemon of the test shares."""
    daemons.STORE_URL = postgres.new_database()
    try:
        with tempfile.TemporaryDirectory(prefix="fg") as path:
            yield Path(path)
    finally:
        daemons.STORE_URL = None


def distilled_once(stored: dict[str, int]) -> dict[int, int]:
    """Facts per seq that the test expects: one for each stored interaction."""
    return dict.fromkeys(stored.values(), 1)


def stored_ids() -> dict[str, int]:
    return dict(rows("", "SELECT client_id, seq FROM interactions"))


class Pusher:
    """Pushes unique interactions to one daemon; keeps the ids that were acknowledged."""

    def __init__(self, socket: str, prefix: str) -> None:
        self.socket, self.prefix = socket, prefix
        self.acknowledged: set[str] = set()
        self.refused = 0  # 503 answers
        self._next = 0
        self._changed = trio.Event()

    async def until(self, done: Callable[[Pusher], bool]) -> None:
        """Return once `done(self)` holds, checked after every answer."""
        while not done(self):
            await self._changed.wait()

    def _answered(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def run(self) -> None:
        pending: list[str] = []
        while True:
            ids = pending or [f"{self.prefix}-{self._next + n}" for n in range(3)]
            self._next += 0 if pending else 3
            try:
                async with socket_client(self.socket) as client:
                    answer = await client.post(
                        "/v1/interactions", json=[interaction(i) for i in ids]
                    )
                self._answered()
                if answer.status_code == 202:
                    self.acknowledged.update(ids)
                    pending = []
                    continue
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"]["code"] == "store_unavailable"
                self.refused += 1
            except httpx.TransportError:
                pass  # the daemon is down: these ids were not acknowledged
            pending = ids
            await trio.sleep(0.05)  # a client's pause before it retries


async def _lease_holder(first: DaemonProcess, second: DaemonProcess) -> DaemonProcess:
    """The daemon whose log says it took the distill lease last (one of them always has it)."""
    while True:
        for daemon in (first, second):
            alive = daemon.process is not None and daemon.process.returncode is None
            if alive and daemon.events("lease_taken"):
                return daemon
        await trio.sleep(0.05)


@pytest.mark.slow  # in the default run too; `-m "not slow"` skips it
async def test_two_daemons_distil_every_acknowledged_push_once(
    shared: Path, fake_llm: FakeLLM
) -> None:
    """Two daemons take pushes; the one distilling is SIGKILLed again and again: no loss, no twice."""
    fake_llm.latency = LLM_LATENCY
    rng = random.Random(SEED)
    pair = []
    for name in ("a", "b"):
        (shared / name).mkdir()
        config = write_config(
            shared / name, fake_llm.base_url, distill={"max_batch_interactions": 4}
        )
        pair.append(DaemonProcess(config, shared / name))
    pushers = [Pusher(d.socket, d.directory.name) for d in pair]
    mid_batch = 0
    with trio.fail_after(180):
        async with pair[0], pair[1], trio.open_nursery() as nursery:
            for daemon in pair:
                await daemon.start()
            for pusher in pushers:
                nursery.start_soon(pusher.run)
            for n in range(KILLS):
                await trio.sleep(rng.uniform(*KILL_AFTER))
                holder = await _lease_holder(*pair)
                if n == KILLS - 1 and not mid_batch:  # no random moment fell mid-call
                    await fake_llm.wait_until(lambda llm: llm.in_flight > 0)
                mid_batch += fake_llm.in_flight > 0
                await holder.kill()
                holder.log_path.write_text("")  # its lease_taken lines died with it
                await holder.start()
            nursery.cancel_scope.cancel()
        fake_llm.latency = 0  # kills are over: the backlog left is drained at full speed
        async with pair[0], pair[1]:
            for daemon in pair:
                await daemon.start()
            stored = stored_ids()
            async with socket_client(pair[0].socket) as client:
                await _until_distilled(client, max(stored.values()))
            for daemon in pair:
                assert await daemon.stop() == 0
    acknowledged = pushers[0].acknowledged | pushers[1].acknowledged
    assert acknowledged - set(stored) == set(), "an acknowledged interaction was lost"
    assert facts_per_seq("") == distilled_once(stored)
    assert mid_batch > 0, "no kill landed while the LLM was answering"


async def _until_distilled(client: httpx.AsyncClient, seq: int) -> None:
    """Wait until the distill watermark, wherever it runs, reaches `seq`."""
    await wait_for_watermark(client, seq)


def _hold_append(url: str, text: str) -> tuple[psycopg.Connection[Any], int]:
    """Begin an append as the store does (barrier, insert) and leave it uncommitted; give up
    (LockNotAvailable) when the barrier is not granted within a second."""
    conn = psycopg.connect(url)
    try:
        conn.execute("SET lock_timeout = '1s'")
        conn.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", LOG_LOCK)
        row = new(text, scope="user:alice")
        seq = conn.execute(_INSERT_INTERACTION, msgspec.structs.astuple(row)).fetchone()
    except BaseException:
        conn.close()
        raise
    assert seq is not None
    return conn, int(seq[0])


def _hold_two_appends(url: str) -> tuple[tuple[psycopg.Connection[Any], int], ...]:
    """Two appends open at once. A read of the log that queues for the barrier between them
    makes the second wait behind it, and it waits for the first: let it pass, and begin again."""
    while True:
        early = _hold_append(url, "early PostgreSQL")
        try:
            return early, _hold_append(url, "late PostgreSQL")
        except psycopg.errors.LockNotAvailable:
            early[0].close()  # rolls back: its seq stays a gap, which PostgreSQL allows


def _barrier_waiters(url: str) -> int:
    sql = (
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND NOT granted"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.execute(sql, (LOG_LOCK[0],)).fetchone()[0])  # type: ignore[index]  # count(*) answers one row


async def _until_feeder_waits(url: str) -> None:
    """Return once a read of the log waits behind an open append (a lock table sends no event)."""
    while True:
        if await trio.to_thread.run_sync(_barrier_waiters, url):
            return
        await trio.sleep(0.05)


async def test_commits_out_of_seq_order_lose_nothing(shared: Path, fake_llm: FakeLLM) -> None:
    """Seq 1 commits after seq 2: the observer waits for it instead of passing it by."""
    url = daemons.STORE_URL
    assert url is not None
    config = load_config(write_config(shared, fake_llm.base_url), {})
    with trio.fail_after(60):
        async with running_daemon(config) as running:
            (early, first), (late, second) = await trio.to_thread.run_sync(_hold_two_appends, url)
            assert first < second
            await trio.to_thread.run_sync(late.commit)  # the later seq commits first
            await _until_feeder_waits(url)
            assert running.hub.progress["distill"].status.watermark == 0
            await trio.to_thread.run_sync(early.commit)
            early.close()
            late.close()
            async with socket_client(config.server.socket) as client:
                await wait_for_watermark(client, second, hub=running.hub)
    assert facts_per_seq("") == {first: 1, second: 1}


async def test_database_restart_under_load_refuses_then_loses_nothing(
    shared: Path, fake_llm: FakeLLM, postgres: Server
) -> None:
    """While PostgreSQL is down pushes get 503; after it is back every 202 is stored, distilled."""
    config = load_config(
        write_config(shared, fake_llm.base_url, store={"busy_timeout_ms": 1000}), {}
    )
    pusher = Pusher(config.server.socket, "p")
    with trio.fail_after(120):
        async with running_daemon(config) as running:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pusher.run)
                await pusher.until(lambda p: len(p.acknowledged) >= 9)
                await trio.to_thread.run_sync(postgres.ctl, "stop", "-m", "fast")
                await pusher.until(lambda p: p.refused >= 2)
                await trio.to_thread.run_sync(postgres.ctl, "start")
                acknowledged = len(pusher.acknowledged)
                await pusher.until(lambda p: len(p.acknowledged) >= acknowledged + 9)
                nursery.cancel_scope.cancel()
            stored = stored_ids()
            async with socket_client(config.server.socket) as client:
                await wait_for_watermark(client, max(stored.values()), hub=running.hub)
    assert pusher.acknowledged - set(stored) == set(), "an acknowledged interaction was lost"
    assert facts_per_seq("") == distilled_once(stored)


async def test_a_commit_without_the_lease_is_refused(shared: Path) -> None:
    """A daemon that lost its observer's lease cannot move that observer's watermark."""
    assert daemons.STORE_URL is not None
    store = PostgresStore(StoreConfig(url=daemons.STORE_URL))
    try:
        await store.append([[new("a")]])
        with pytest.raises(
            StoreError, match=r"^this daemon no longer holds the lease of observer 'distill'$"
        ):
            await store.set_watermark("distill", 1)
        assert await store.watermark("distill") == 0
    finally:
        store.close()


async def test_a_recall_read_past_its_budget_is_canceled(shared: Path) -> None:
    """A scope's read on PostgreSQL is stopped by statement_timeout (QueryTimeout), and the
    next read on the same connections runs without a limit."""
    assert daemons.STORE_URL is not None
    store = PostgresStore(StoreConfig(url=daemons.STORE_URL, readers=1))
    try:
        with pytest.raises(QueryTimeout, match=r"^the query ran past its time budget \(50 ms,"):
            await store.read(lambda c: c.execute("SELECT pg_sleep(30)"), scope="a", budget=0.05)
        sleep = "SELECT pg_sleep(0.1), current_setting('statement_timeout')"
        assert (await store.read(lambda c: c.execute(sleep).fetchone(), scope="a"))[1] == "0"
    finally:
        store.close()


def _lock_waiters(url: str) -> int:
    """Backends waiting for a lock of any kind."""
    sql = "SELECT count(DISTINCT pid) FROM pg_locks WHERE NOT granted"
    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.execute(sql).fetchone()[0])  # type: ignore[index]  # count answers one row


async def _commit_once_waited_for(
    url: str, held: psycopg.Connection[Any], done: Callable[[], Awaitable[bool]]
) -> None:
    """Commit `held` once a backend waits for a lock; at once if the code under test is
    `done` without waiting (the test then fails on what it answered)."""
    while not await trio.to_thread.run_sync(_lock_waiters, url):
        if await done():
            break  # it did not wait
        await trio.sleep(0.05)  # a lock table sends no event
    await trio.to_thread.run_sync(held.commit)


async def _any(found: list[Any]) -> bool:
    return bool(found)


async def _has_vector(store: PostgresStore, fact_id: int) -> bool:
    return fact_id in (await _embedded_facts(store))[1]


async def _until_waiting(url: str, backends: int) -> None:
    """Return once that many backends wait for a lock (a lock table sends no event)."""
    while True:
        if await trio.to_thread.run_sync(_lock_waiters, url) >= backends:
            return
        await trio.sleep(0.05)


async def test_two_daemons_retiring_one_scopes_facts_take_turns(shared: Path) -> None:
    """Daemon a merges fact 1 into 2 while daemon b merges 2 into 1, each from what it read
    before the other committed: the first to commit applies its change, the second finds a
    fact retired and applies nothing (no two facts retired into each other)."""
    url = daemons.STORE_URL
    assert url is not None
    a, b = (PostgresStore(StoreConfig(url=url)) for _ in range(2))
    try:
        await a.append([[new("Ana likes tea."), new("Ana likes green tea.")]])
        for seq, text in ((1, "Ana likes tea."), (2, "Ana likes green tea.")):
            fact = Fact(kind="preference", text=text)
            result = ScopeResult(f"b{seq}", "s", None, "", [fact], seq, seq)
            await a.commit_batch("distill", BatchOutcome([result], [], [], None))
        await a.commit_consolidation(NAME, ConsolidationRun("r0", "m", "s", 2, 2, [], Usage()))
        holder = await trio.to_thread.run_sync(psycopg.connect, url)  # both commits end on the
        sql = "SELECT 1 FROM consolidation_progress WHERE scope = 's' FOR UPDATE"  # progress row
        await trio.to_thread.run_sync(holder.execute, sql)
        applied: list[list[ConsolidationChange]] = []

        async def merge(store: PostgresStore, fact: int, into: int) -> None:
            change = ConsolidationChange("merge", fact, into, "duplicate")
            run = ConsolidationRun(f"r{fact}", "m", "s", 2, 2, [change], Usage())
            applied.append(await store.commit_consolidation(NAME, run))

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(merge, a, 1, 2)
                nursery.start_soon(merge, b, 2, 1)
                await _until_waiting(url, 2)
                await trio.to_thread.run_sync(holder.commit)
        holder.close()
    finally:
        a.close()
        b.close()
    assert sorted(len(changes) for changes in applied) == [0, 1]
    assert rows("", "SELECT count(*) FROM facts WHERE superseded_by IS NULL") == [(1,)]
    assert rows("", "SELECT count(*) FROM consolidation_changes") == [(1,)]


async def test_client_ids_become_unique_per_scope_on_a_database_of_version_2(
    shared: Path,
) -> None:
    """The (scope, id) migration keeps the rows and lets another scope store a stored id."""
    assert daemons.STORE_URL is not None
    with psycopg.connect(daemons.STORE_URL, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY,"
            " name text NOT NULL, applied_at text NOT NULL)"
        )
        for version, (name, sql) in enumerate(PG_MIGRATIONS[:2], start=1):
            conn.execute(sql)
            conn.execute("INSERT INTO schema_migrations VALUES (%s, %s, 'x')", (version, name))
    store = PostgresStore(StoreConfig(url=daemons.STORE_URL))
    try:
        assert await store.append([[new("t", "a", scope="one")]]) == [1]
        assert await store.append([[new("t", "a", scope="two"), new("t", "a", scope="one")]]) == [1]
    finally:
        store.close()
    assert sorted(rows("", "SELECT scope, client_id FROM interactions")) == [
        ("one", "a"),
        ("two", "a"),
    ]


# The text columns a btree index may hold as they are, each short whatever a client sends: a
# scope (at most 2 KB), names from the config (an observer's, a model server's URL) and fixed words.
SHORT_TEXTS = {"scope", "observer", "endpoint", "kind", "item"}
_BTREE_TEXT_COLUMNS = """
    SELECT DISTINCT a.attname FROM pg_index AS i
    JOIN pg_class AS c ON c.oid = i.indexrelid JOIN pg_am AS m ON m.oid = c.relam
    JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
    WHERE m.amname = 'btree' AND c.relnamespace = 'public'::regnamespace
        AND a.atttypid = 'text'::regtype
"""


async def test_no_btree_index_holds_a_text_a_client_can_make_long(shared: Path) -> None:
    """A btree row holds at most 2,704 bytes: a fact's text, a client id, a session or a
    summary is indexed by its digest (or not by a btree at all), never as it is."""
    assert daemons.STORE_URL is not None
    PostgresStore(StoreConfig(url=daemons.STORE_URL)).close()
    held = {name for (name,) in rows("", _BTREE_TEXT_COLUMNS)}
    assert held <= SHORT_TEXTS, held - SHORT_TEXTS
    assert "scope" in held


async def test_stored_ids_and_facts_stay_unique_on_a_database_of_version_5(
    shared: Path,
) -> None:
    """The migration to digests in the unique indexes keeps the rows, and what they make
    unique: a stored client id is a duplicate, a stored fact said again is merged."""
    assert daemons.STORE_URL is not None
    with psycopg.connect(daemons.STORE_URL, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY,"
            " name text NOT NULL, applied_at text NOT NULL)"
        )
        for version, (name, sql) in enumerate(PG_MIGRATIONS[:5], start=1):
            conn.execute(sql)
            conn.execute("INSERT INTO schema_migrations VALUES (%s, %s, 'x')", (version, name))
        conn.execute(
            "INSERT INTO interactions (client_id, scope, timestamp, received_at, tokens, messages)"
            " VALUES ('a', 'one', 't', 't', 1, %s)",
            (msgspec.json.encode([{"role": "user", "text": "Ana moved."}]),),
        )
        conn.execute(
            "INSERT INTO facts (kind, text, norm, scope, batch_id, first_seq, last_seq, first_at,"
            " last_at, created_at, last_seen_at) VALUES ('state', 'Ana moved.', 'ana moved',"
            " 'one', 'b0', 1, 1, 't', 't', 't', 't')"
        )
    store = PostgresStore(StoreConfig(url=daemons.STORE_URL))
    try:
        assert await store.append([[new("t", "a", scope="one"), new("t", "b", scope="one")]]) == [1]
        result = ScopeResult("b1", "one", None, "s", [Fact("state", "ANA moved!")], 2, 2)
        async with store.lease("distill", lambda _: None):
            await store.commit_batch("distill", BatchOutcome([result], [], [], watermark=2))
    finally:
        store.close()
    assert rows("", "SELECT client_id FROM interactions ORDER BY seq") == [("a",), ("b",)]
    assert rows("", "SELECT text, seen_count, last_seq FROM facts") == [("Ana moved.", 2, 2)]


async def test_status_totals_come_from_the_shared_store(shared: Path, fake_llm: FakeLLM) -> None:
    """Two daemons, pushes to each in turn: both statuses count the whole log, its last seq,
    and the backlog behind the watermark the store holds, not what one daemon appended."""
    pair = []
    for name in ("a", "b"):
        (shared / name).mkdir()
        pair.append(DaemonProcess(write_config(shared / name, fake_llm.base_url), shared / name))
    with trio.fail_after(120):
        async with pair[0], pair[1]:
            for daemon in pair:
                await daemon.start()
            for n in range(40):
                async with socket_client(pair[n % 2].socket) as client:
                    answer = await client.post("/v1/interactions", json=interaction(f"i-{n}"))
                    assert answer.status_code == 202
            last = max(stored_ids().values())
            async with socket_client(pair[0].socket) as client:
                await _until_distilled(client, last)
            for daemon in pair:
                async with socket_client(daemon.socket) as client:
                    status = (await client.get("/v1/status")).json()
                assert status["log"] == {"last_seq": last, "count": 40}, daemon.directory.name
                distill = next(o for o in status["observers"] if o["name"] == "distill")
                assert (distill["watermark"], distill["backlog"]) == (last, 0)
                assert await daemon.stop() == 0


def _hold_fact(url: str, text: str) -> tuple[psycopg.Connection[Any], int]:
    """Write a fact by hand as the store does and leave it uncommitted: its id is taken."""
    conn = psycopg.connect(url)
    at = now()
    return conn, edits.add_fact(portable(conn), NewFact(text, scope="s"), at, at)


async def _embedded_facts(store: PostgresStore) -> tuple[int, list[int]]:
    """The embed observer's progress through the facts, and the facts that have a vector."""
    progress = "SELECT coalesce(max(last_id), 0) FROM embed_progress WHERE item = 'fact'"
    vectors = "SELECT item_id FROM vectors WHERE item = 'fact' ORDER BY item_id"

    def read(conn: Any) -> tuple[int, list[int]]:
        (done,) = conn.execute(progress).fetchone()
        return int(done), [int(i) for (i,) in conn.execute(vectors)]

    return await store.read(read)


async def test_facts_committed_out_of_id_order_are_all_embedded(shared: Path) -> None:
    """A fact whose id was taken first commits after a later one (two daemons: one distils, the
    other takes a user's fact): the embed observer waits for it. It read past the later id, and
    the earlier one never had a vector."""
    url = daemons.STORE_URL
    assert url is not None
    store = PostgresStore(StoreConfig(url=url))
    held, first = await trio.to_thread.run_sync(_hold_fact, url, "The sister is a nurse.")
    try:
        later = (await store.add_fact(NewFact("The printer jams.", scope="s"), None)).fact.id
        assert first < later
        hub = Hub(store, [EmbedObserver(store, EMBED)], 64)
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.serve)
            with trio.fail_after(120):
                await _commit_once_waited_for(url, held, lambda: _has_vector(store, later))
                await _until(hub, lambda: _progressed(store, later))
            nursery.cancel_scope.cancel()
        assert await _embedded_facts(store) == (later, [first, later])
    finally:
        held.close()
        store.close()


async def _progressed(store: PostgresStore, fact_id: int) -> bool:
    return (await _embedded_facts(store))[0] >= fact_id


async def test_a_listing_paged_by_id_waits_for_a_fact_committing_late(shared: Path) -> None:
    """A fact whose id was taken first commits after a later one: a listing read page by page
    past the later one waits for it. It answered the later one alone, and the next page, after
    it, never held the first."""
    url = daemons.STORE_URL
    assert url is not None
    store = PostgresStore(StoreConfig(url=url))
    held, first = await trio.to_thread.run_sync(_hold_fact, url, "The sister is a nurse.")
    listed: list[int] = []

    async def every_page() -> None:
        after: int | None = 0
        while after is not None:
            page = await store.read(list_facts, Page(scope="s", after=after, limit=1))
            listed.extend(f.id for f in page.facts)
            after = None if page.next is None else int(page.next)

    try:
        later = (await store.add_fact(NewFact("The printer jams.", scope="s"), None)).fact.id
        assert first < later
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(every_page)
                await _commit_once_waited_for(url, held, lambda: _any(listed))
        assert listed == [first, later]
    finally:
        held.close()
        store.close()


def _fenced_commit_in_flight(url: str, observer: str) -> psycopg.Connection[Any]:
    """An observer's commit as its holder makes it, past its fence (the watermark row locked,
    the lease held then) and not yet committed; the holder's lease session gone after it."""
    lease = psycopg.connect(url, autocommit=True)
    lease.execute("SELECT pg_advisory_lock(%s, %s)", (LEASE_CLASS, _key(observer)))
    conn = psycopg.connect(url)
    conn.execute("SELECT seq FROM watermarks WHERE observer = %s FOR UPDATE", (observer,))
    conn.execute("UPDATE watermarks SET seq = 5 WHERE observer = %s", (observer,))
    lease.close()  # its session ends, and the lease with it
    return conn


async def test_a_new_lease_holder_waits_for_the_commit_its_predecessor_had_in_flight(
    shared: Path,
) -> None:
    """The holder's lease went after its commit passed the fence: the next holder starts from
    that commit's watermark. It read the one before, and distilled the batch again."""
    url = daemons.STORE_URL
    assert url is not None
    store = PostgresStore(StoreConfig(url=url))
    started: list[int] = []

    async def take_over() -> None:
        async with store.lease("distill", lambda _: None):
            started.append(await store.watermark("distill"))

    try:
        async with store.lease("distill", lambda _: None):
            await store.set_watermark("distill", 1)  # the row, as any earlier commit leaves it
        in_flight = await trio.to_thread.run_sync(_fenced_commit_in_flight, url, "distill")
        try:
            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(take_over)
                    await _commit_once_waited_for(url, in_flight, lambda: _any(started))
        finally:
            in_flight.close()
        assert started == [5]
    finally:
        store.close()


async def test_a_forget_waits_for_an_append_of_the_scope_in_flight(shared: Path) -> None:
    """A turn of the scope whose seq was taken before the forget and committed after it: the
    forget erases it too. It stayed in the log, below the seq the observers then skip as
    forgotten, and was never distilled nor embedded."""
    url = daemons.STORE_URL
    assert url is not None
    store = PostgresStore(StoreConfig(url=url))
    held, early = await trio.to_thread.run_sync(_hold_append, url, "early PostgreSQL")
    forgotten: list[int] = []

    async def forget() -> None:
        forgotten.append((await store.forget("user:alice")).through)

    try:
        await store.append([[new("late PostgreSQL", scope="user:alice")]])
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(forget)
                await _commit_once_waited_for(url, held, lambda: _any(forgotten))
        (through,) = forgotten
        left = rows(url, "SELECT seq FROM interactions WHERE scope = 'user:alice'")
        assert early <= through and left == []
    finally:
        held.close()
        store.close()
