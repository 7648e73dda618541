"""The store: migrations, durable appends, atomic batch commits, round-trips (both backends where
the answer is the same)."""

from __future__ import annotations

import os
import random
import sqlite3
import stat
import threading
import typing
import uuid
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forged.errors import InvalidRequest, StoreError
from forged.models import (
    ConsolidationChange,
    ConsolidationRun,
    Deleted,
    Fact,
    FactText,
    Key,
    NewFact,
    Usage,
    normalise,
)
from forged.store import common
from forged.store.postgres_schema import BTREE_ROW_BYTES, SEARCH_FALLBACK_CHARS
from forged.store.records import BatchOutcome, DeadLetter, DistillRun, ScopeResult
from forged.store.sqlite import Store
from forged.store.sqlite_schema import MIGRATIONS
from tests.conftest import StoreOpener
from tests.support import daemons
from tests.support.data import new, rows
from tests.support.profiles import examples

KEY_CHARS = typing.get_args(Key)[1].max_length  # the longest scope, session and client id
FACT_CHARS = typing.get_args(FactText)[1].max_length  # the longest fact a user writes


def ignore(_watermark: int) -> None:
    """Follows no other daemon's watermark: the tests hold each lease alone."""


def wide(chars: int, seed: int) -> str:
    """Text of 4-byte UTF-8 characters that does not compress: the most bytes a length allows."""
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x20000, 0x2A6E0)) for _ in range(chars))


def test_migrations_are_recorded_once(tmp_path: Path) -> None:
    """Opening twice applies each migration once and records it."""
    Store(str(tmp_path / "f.db")).close()
    store = Store(str(tmp_path / "f.db"))
    store.close()
    with sqlite3.connect(tmp_path / "f.db") as conn:
        versions = conn.execute("SELECT version FROM schema_migrations").fetchall()
    assert versions == [(v,) for v in range(1, len(MIGRATIONS) + 1)]


async def test_database_files_are_private_under_a_lax_umask(tmp_path: Path) -> None:
    """With umask 022 (outside systemd) the database, WAL and shm are created 0600."""
    old = os.umask(0o022)
    try:
        store = Store(str(tmp_path / "f.db"))
    finally:
        os.umask(old)
    try:
        await store.append([[new("private memory")]])
        modes = {
            name: stat.S_IMODE(os.stat(tmp_path / name).st_mode)
            for name in ("f.db", "f.db-wal", "f.db-shm")
        }
    finally:
        store.close()
    assert modes == {"f.db": 0o600, "f.db-wal": 0o600, "f.db-shm": 0o600}


def test_pragmas_are_durable(tmp_path: Path) -> None:
    """WAL and synchronous=FULL: a 202 survives power loss."""
    store = Store(str(tmp_path / "f.db"))
    mode = store._writer.execute("PRAGMA journal_mode").fetchone()
    sync = store._writer.execute("PRAGMA synchronous").fetchone()
    store.close()
    assert (mode, sync) == (("wal",), (2,))


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    """A database written by a newer forged is not opened by an older one."""
    Store(str(tmp_path / "f.db")).close()
    with sqlite3.connect(tmp_path / "f.db") as conn:
        conn.execute(
            "INSERT INTO schema_migrations VALUES (?, 'future', 'x')", (len(MIGRATIONS) + 1,)
        )
    with pytest.raises(StoreError, match=r"newer than this forged knows"):
        Store(str(tmp_path / "f.db"))


async def test_duplicate_ids_take_no_seq(open_store: StoreOpener) -> None:
    """Seqs stay dense: a duplicate id is counted, not numbered."""
    store = open_store()
    assert await store.append([[new("a", "x")], [new("b", "x"), new("c", "y")]]) == [1, 1]
    assert (store.last_seq, store.count) == (2, 2)
    assert [i.seq for i in await store.read_log(0, 10)] == [1, 2]
    store.close()


async def test_same_id_twice_in_one_request_is_stored_once(open_store: StoreOpener) -> None:
    """The second use of an id within a request is a duplicate, and takes no seq."""
    store = open_store()
    assert await store.append([[new("a", "x"), new("b", "x"), new("c")]]) == [2]
    stored = [(i.seq, i.messages[0].text) for i in await store.read_log(0, 10)]
    assert stored == [(1, "a"), (2, "c")]
    store.close()


async def test_the_log_is_decoded_off_the_event_loop(
    open_store: StoreOpener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log's turns (a chunk of them may hold many megabytes) are decoded in the reader's
    thread: the event loop waited 1.5 s on 40 turns of 7 MB read for a rebuild of the index."""
    store = open_store()
    await store.append([[new("a"), new("b")]])
    decoder, threads = common._MESSAGES, set[int]()

    class Recording:
        def decode(self, raw: bytes) -> object:
            threads.add(threading.get_ident())
            return decoder.decode(raw)

    monkeypatch.setattr(common, "_MESSAGES", Recording())
    assert [i.seq for i in await store.read_log(0, 10)] == [1, 2]
    store.close()
    assert threads and threading.get_ident() not in threads


async def test_a_read_of_the_log_holds_a_bounded_size_of_messages(
    open_store: StoreOpener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read stops before the turn that takes it past MAX_READ_BYTES, and a turn larger than
    that is read alone: 2,000 turns of 16 MB a read would need 32 GB to decode."""
    monkeypatch.setattr(common, "MAX_READ_BYTES", 10_000)
    store = open_store()
    await store.append([[new("a" * 4_000) for _ in range(3)], [new("b" * 20_000), new("c")]])
    assert [i.seq for i in await store.read_log(0, 100)] == [1, 2]
    assert [i.seq for i in await store.read_log(2, 100)] == [3]
    assert [i.seq for i in await store.read_log(3, 100)] == [4]
    assert [i.seq for i in await store.read_log(4, 100)] == [5]
    assert [i.seq for i in await store.read_log(1, 1)] == [2]
    assert await store.read_log(5, 100) == []
    store.close()


@pytest.mark.sqlite_only
async def test_the_logs_end_survives_a_restart_after_its_newest_turns_are_deleted(
    open_store: StoreOpener,
) -> None:
    """The last seq given stays the log's end after a restart, as it was while running: read
    as the largest left, it made the turn index look ahead of the log, and rebuilt it whole."""
    store = open_store()
    await store.append([[new("a"), new("b"), new("c")]])
    await store.delete("interaction", 3)
    running = store.last_seq
    store.close()
    store = open_store()
    assert (store.last_seq, store.count) == (running, 2) == (3, 2)
    assert await store.append([[new("d")]]) == [1] and store.last_seq == 4
    store.close()


async def test_interactions_without_id_are_never_duplicates(open_store: StoreOpener) -> None:
    """Only a client id makes a push idempotent: the same text twice is stored twice."""
    store = open_store()
    assert await store.append([[new("a"), new("a")], [new("a")]]) == [2, 1]
    store.close()


async def test_ids_stored_before_a_restart_are_duplicates(open_store: StoreOpener) -> None:
    """Idempotency survives a restart, and the seqs after it stay gap-free."""
    store = open_store()
    await store.append([[new("a", "x"), new("b", "y")]])
    store.close()
    store = open_store()
    assert await store.append([[new("c", "y"), new("d", "z")], [new("e", "x")]]) == [1, 0]
    assert [i.seq for i in await store.read_log(0, 10)] == [1, 2, 3]
    store.close()


_IDS = st.one_of(st.none(), st.sampled_from("abcde"))
_GROUPS = st.lists(st.lists(st.lists(_IDS, max_size=4), min_size=1, max_size=3), max_size=4)


@settings(  # every example opens a database and commits up to four times: disk time, no deadline
    max_examples=examples(50),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(groups=_GROUPS)
async def test_first_use_of_an_id_wins(
    tmp_path: Path, groups: list[list[list[str | None]]]
) -> None:
    """Over any groups of requests, an id is stored at its first use only; seqs stay dense."""
    store = Store(str(tmp_path / f"ids-{uuid.uuid4().hex}.db"))
    seen: set[str] = set()
    for group in groups:
        expected = []
        for request in group:
            added = 0
            for client_id in request:
                if client_id is None:
                    added += 1
                elif client_id not in seen:
                    added += 1
                    seen.add(client_id)
            expected.append(added)
        assert await store.append([[new("t", i) for i in request] for request in group]) == expected
    assert [i.seq for i in await store.read_log(0, 100)] == list(range(1, store.count + 1))
    store.close()


async def test_failed_batch_commit_leaves_nothing(open_store: StoreOpener) -> None:
    """Results and watermark move together: a failing commit writes neither."""
    store = open_store()
    await store.append([[new("a")]])
    bad = Fact(kind="opinion", text="not a kind the schema allows")  # type: ignore[arg-type]
    result = ScopeResult("b1", "s", None, "sum", [bad], 1, 1)
    async with store.lease("distill", ignore):
        with pytest.raises(StoreError):
            await store.commit_batch("distill", BatchOutcome([result], [], [], watermark=1))
    totals = await store.observer_totals("distill")
    assert totals.watermark == 0
    assert rows(store.path, "SELECT count(*) FROM summaries") == [(0,)]
    store.close()


async def test_same_fact_from_two_batches_is_merged(open_store: StoreOpener) -> None:
    """A fact with the same scope, kind and normalised text is counted, not stored twice."""
    store = open_store()
    await store.append([[new("a"), new("b")]])
    for seq, text in ((1, "Alice prefers tea."), (2, "alice PREFERS tea")):
        fact = Fact(kind="preference", text=text)
        result = ScopeResult(f"b{seq}", "s", None, "sum", [fact], seq, seq)
        async with store.lease("distill", ignore):
            await store.commit_batch("distill", BatchOutcome([result], [], [], watermark=seq))
    merged = rows(store.path, "SELECT seen_count, first_seq, last_seq FROM facts")
    store.close()
    assert merged == [(2, 1, 2)]


def test_normalise_folds_case_space_and_punctuation() -> None:
    """Trivially different spellings compare equal."""
    assert (
        normalise("  Alice   prefers TEA! ")
        == normalise("alice prefers tea")
        == "alice prefers tea"
    )


@settings(
    max_examples=examples(50),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)  # each example opens a database with fsync: its time follows the machine's load
@given(texts=st.lists(st.text(min_size=1).filter(str.strip), min_size=1, max_size=5))
async def test_interactions_round_trip(tmp_path: Path, texts: list[str]) -> None:
    """What is appended is read back unchanged, in order."""
    store = Store(str(tmp_path / f"rt-{uuid.uuid4().hex}.db"))  # a fresh file per example
    await store.append([[new(t) for t in texts]])
    read = await store.read_log(0, 100)
    store.close()
    assert [i.messages[0].text for i in read] == texts


def _v2_database(path: Path) -> sqlite3.Connection:
    """A database at schema version 2, as forged wrote it before facts were dated."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
        " applied_at TEXT NOT NULL)"
    )
    for version, (name, sql) in enumerate(MIGRATIONS[:2], start=1):
        conn.executescript(sql)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 'x')", (version, name))
    return conn


def test_migration_dates_old_rows_by_their_interactions(tmp_path: Path) -> None:
    """Facts and summaries of a v2 database get the span of their interactions' timestamps."""
    conn = _v2_database(tmp_path / "v2.db")
    for at in ("2023-05-07T10:00:00.000Z", "2023-05-09T18:00:00.000Z"):
        conn.execute(
            "INSERT INTO interactions (scope, timestamp, received_at, tokens, messages)"
            " VALUES ('s', ?, '2026-01-01', 1, CAST(? AS BLOB))",
            (at, '[{"role": "user", "text": "Alice moved to Lyon."}]'),
        )
    conn.execute(
        "INSERT INTO facts (kind, text, norm, scope, batch_id, first_seq, last_seq,"
        " created_at, last_seen_at) VALUES ('state', 'Alice lives in Lyon.', 'n', 's',"
        " 'b', 1, 2, '2026-01-01', '2026-01-01')"
    )
    conn.execute(
        "INSERT INTO facts (kind, text, norm, scope, batch_id, first_seq, last_seq,"
        " created_at, last_seen_at) VALUES ('state', 'No source left.', 'm', 's',"
        " 'b', 7, 7, '2026-01-02', '2026-01-02')"
    )
    conn.execute(
        "INSERT INTO summaries (observer, batch_id, scope, text, first_seq, last_seq,"
        " created_at) VALUES ('distill', 'b', 's', 'Alice moved.', 2, 2, '2026-01-01')"
    )
    conn.execute("DELETE FROM facts WHERE id = 2")  # an id used once must stay used
    conn.close()
    store = Store(str(tmp_path / "v2.db"))
    rows = store._reader.execute("SELECT id, first_at, last_at, created_at FROM facts").fetchall()
    summary = store._reader.execute("SELECT first_at, last_at FROM summaries").fetchall()
    found = store._reader.execute(
        "SELECT rowid FROM interactions_fts WHERE interactions_fts MATCH 'lyon'"
    ).fetchall()
    store._writer.execute(
        "INSERT INTO facts (kind, text, norm, scope, batch_id, first_seq,"
        " last_seq, first_at, last_at, created_at, last_seen_at) VALUES"
        " ('event', 'Alice went to Paris.', 'p', 's', 'b', 1, 1, 'a', 'a', 'a',"
        " 'a')"
    )
    (new_id,) = store._writer.execute("SELECT max(id) FROM facts").fetchone()
    store.close()
    assert rows == [(1, "2023-05-07T10:00:00.000Z", "2023-05-09T18:00:00.000Z", "2026-01-01")]
    assert summary == [("2023-05-09T18:00:00.000Z", "2023-05-09T18:00:00.000Z")]
    assert found == [(1,), (2,)]
    assert new_id == 3


def test_migration_keeps_a_fact_without_sources_dated_by_its_distillation(tmp_path: Path) -> None:
    """A v2 fact whose interactions were forgotten is dated by when it was distilled."""
    conn = _v2_database(tmp_path / "v2.db")
    conn.execute(
        "INSERT INTO facts (kind, text, norm, scope, batch_id, first_seq, last_seq,"
        " created_at, last_seen_at) VALUES ('state', 'Orphan.', 'o', 's', 'b', 5, 6,"
        " '2026-01-02', '2026-01-02')"
    )
    conn.close()
    store = Store(str(tmp_path / "v2.db"))
    row = store._reader.execute("SELECT first_at, last_at FROM facts").fetchone()
    store.close()
    assert row == ("2026-01-02", "2026-01-02")


async def test_batch_results_are_dated_by_their_interactions(open_store: StoreOpener) -> None:
    """A committed fact and summary carry their source interactions' first and last timestamps."""
    store = open_store()
    early = msgspec.structs.replace(new("a"), timestamp="2023-05-07T10:00:00.000Z")
    late = msgspec.structs.replace(new("b"), timestamp="2023-05-08T09:00:00.000Z")
    other = msgspec.structs.replace(new("c", scope="t"), timestamp="2020-01-01T00:00:00.000Z")
    await store.append([[early, other, late]])
    result = ScopeResult("b1", "s", None, "sum", [Fact("state", "Alice likes tea.")], 1, 3)
    async with store.lease("distill", ignore):
        await store.commit_batch("distill", BatchOutcome([result], [], [], watermark=3))
    spans = rows(
        store.path,
        "SELECT first_at, last_at FROM facts UNION ALL SELECT first_at, last_at FROM summaries",
    )
    store.close()
    assert spans == [("2023-05-07T10:00:00.000Z", "2023-05-08T09:00:00.000Z")] * 2


async def test_new_kinds_are_accepted_by_the_schema(tmp_path: Path) -> None:
    """event and profile facts are stored; the CHECK constraint still refuses other kinds."""
    store = Store(str(tmp_path / "f.db"))
    insert = (
        "INSERT INTO facts (kind, text, norm, scope, batch_id, first_seq, last_seq,"
        " first_at, last_at, created_at, last_seen_at)"
        " VALUES (?, ?, ?, 's', 'b', 1, 1, 'a', 'a', 'a', 'a')"
    )
    for kind in ("event", "profile"):
        store._writer.execute(insert, (kind, kind, kind))
    with pytest.raises(sqlite3.IntegrityError):
        store._writer.execute(insert, ("opinion", "o", "o"))
    store.close()


async def test_a_batch_of_a_scope_forgotten_meanwhile_stores_nothing_of_it(
    open_store: StoreOpener,
) -> None:
    """Results, runs and dead letters of forgotten seqs are left out; the rest and the watermark
    are stored, and the answer says what was."""
    store = open_store()
    await store.append([[new("a", scope="fz"), new("b", scope="kept"), new("c", scope="fz")]])
    forgotten = await store.forget("fz", ["distill"])
    assert (forgotten.deleted, forgotten.through) == (Deleted(2, 0, 0), 3)
    fact = [Fact(kind="state", text="Something was said.")]
    runs = [
        DistillRun("b1", "m", scope, 1, seq, seq, Usage(calls=1), "committed")
        for scope, seq in (("fz", 1), ("kept", 2))
    ]
    outcome = BatchOutcome(
        [
            ScopeResult("b1", "fz", None, "s", fact, 1, 1),
            ScopeResult("b1", "kept", None, "s", fact, 2, 2),
        ],
        [DeadLetter(3, "too long")],
        runs,
        watermark=3,
    )
    async with store.lease("distill", ignore):
        stored = await store.commit_batch("distill", outcome)
    scopes = {
        t: rows(store.path, f"SELECT DISTINCT scope FROM {t}")
        for t in ("summaries", "facts", "distill_runs")
    }
    dead = rows(store.path, "SELECT count(*) FROM dead_letters")[0][0]
    totals = await store.observer_totals("distill")
    store.close()
    assert all(found == [("kept",)] for found in scopes.values()), scopes
    assert (dead, totals.watermark, totals.llm_calls) == (0, 3, 1)
    assert (len(stored.results), len(stored.runs), stored.dead_letters) == (1, 1, [])


async def test_a_fact_longer_than_an_index_row_is_stored_merged_and_retired(
    open_store: StoreOpener,
) -> None:
    """A fact of 8,000 bytes (more than a PostgreSQL btree row holds) is committed, merged with
    its respelling, refused when a user writes it again, and superseded by another as long."""
    store = open_store()
    await store.append([[new("a"), new("b"), new("c")]])
    text, newer = wide(FACT_CHARS - 4, 1), wide(FACT_CHARS, 2)
    assert len(text.encode()) > BTREE_ROW_BYTES
    said = [Fact("state", f"{text} Ana"), Fact("state", f"{text} ANA!"), Fact("state", newer)]
    async with store.lease("distill", ignore):
        for seq, fact in enumerate(said, 1):
            fact.replaces = [1] if fact.text == newer else []
            result = ScopeResult(f"b{seq}", "s", None, "sum", [fact], seq, seq)
            await store.commit_batch("distill", BatchOutcome([result], [], [], watermark=seq))
    with pytest.raises(
        InvalidRequest, match=r"^fact \d+ of scope 's' already says this as a state;"
    ):
        await store.add_fact(NewFact(text=newer.upper(), scope="s"), None)
    stored = rows(store.path, "SELECT id, seen_count, superseded_by, text FROM facts ORDER BY id")
    store.close()
    (first, *_), (last, *_) = stored
    assert stored == [(first, 2, last, f"{text} Ana"), (last, 1, None, newer)]


async def test_the_longest_scope_session_and_id_pass_every_index(open_store: StoreOpener) -> None:
    """A scope, session and client id of the most bytes allowed each (512 four-byte characters)
    are stored once, distilled with a run and a dead letter, edited, consolidated and erased."""
    store = open_store()
    scope, session, ids = (
        wide(KEY_CHARS, 3),
        wide(KEY_CHARS, 4),
        [wide(KEY_CHARS, 5), wide(KEY_CHARS, 6)],
    )
    assert len((scope + ids[0]).encode()) > BTREE_ROW_BYTES
    turns = [msgspec.structs.replace(new("a", i, scope), session=session) for i in ids]
    assert await store.append([turns]) == [2]
    assert await store.append([turns]) == [0]
    fact = Fact("state", wide(FACT_CHARS, 7))
    run = DistillRun("b1", "m", scope, 2, 1, 2, Usage(calls=1), "committed")
    result = ScopeResult("b1", scope, session, "sum", [fact], 1, 1)
    async with store.lease("distill", ignore):
        outcome = BatchOutcome([result], [DeadLetter(2, "too long")], [run], watermark=2)
        await store.commit_batch("distill", outcome)
    written = (await store.add_fact(NewFact(text=wide(FACT_CHARS, 8), scope=scope), None)).fact.id
    merge = ConsolidationChange("merge", written, 1, "the same")
    await store.commit_consolidation(
        "consolidate", ConsolidationRun("r1", "m", scope, 2, written, [merge], Usage(calls=1))
    )
    await store.delete("fact", 1, scope)
    forgotten = await store.forget(scope, ["distill"])
    store.close()
    assert forgotten.deleted == Deleted(2, 1, 1)


async def test_a_turn_whose_words_overflow_a_tsvector_is_stored_with_its_group(
    open_store: StoreOpener,
) -> None:
    """A turn of 100,000 random CJK characters (its characters and pairs overflow PostgreSQL's
    1 MB tsvector) is stored with the other request of its commit, a fact of its whole line is
    committed, and on PostgreSQL the turn is searched by its start."""
    store = open_store()
    rng = random.Random(9)
    line = "".join(chr(rng.randrange(0x4E00, 0xA000)) for _ in range(100_000))
    assert await store.append([[new(line)], [new("Ana moved to Porto.")]]) == [1, 1]
    result = ScopeResult("b1", "s", None, "", [Fact("event", line)], 1, 1)
    async with store.lease("distill", ignore):
        await store.commit_batch("distill", BatchOutcome([result], [], [], watermark=2))
    stored = rows(store.path, "SELECT (SELECT count(*) FROM interactions), count(*) FROM facts")
    if daemons.STORE_URL:
        matches = "SELECT count(*) FROM interactions WHERE search @@ to_tsquery('english', ?)"
        start, past = line[:2], line[SEARCH_FALLBACK_CHARS + 10 : SEARCH_FALLBACK_CHARS + 12]
        assert (rows("", matches, start), rows("", matches, past)) == ([(1,)], [(0,)])
    store.close()
    assert stored == [(2, 1)]


async def test_a_dead_letter_redistilled_twice_at_once_has_one_set_of_results(
    open_store: StoreOpener,
) -> None:
    """Two re-runs read the same open dead letter (two daemons of a shared store, each asked
    to redistill) and commit one after the other: the second's results are left out. Both
    were written, each re-run's own words a fact of its own."""
    store = open_store()
    await store.append([[new("Alice prefers tea.")]])
    async with store.lease("distill", ignore):
        outcome = BatchOutcome([], [DeadLetter(1, "too long")], [], watermark=1)
        await store.commit_batch("distill", outcome)
    (letter,) = await store.open_dead_letters("distill")
    for n, text in enumerate(("Alice prefers tea.", "Alice likes her tea.")):
        fact = Fact("preference", text, sources=[1])
        result = ScopeResult(f"r{n}", "s", None, "Alice and her tea.", [fact], 1, 1)
        await store.commit_batch("distill", BatchOutcome([result], [], [], None, [letter.id]))
    facts = rows(store.path, "SELECT text FROM facts")
    summaries = rows(store.path, "SELECT batch_id FROM summaries")
    store.close()
    assert (facts, summaries) == ([("Alice prefers tea.",)], [("r0",)])
