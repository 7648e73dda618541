"""Reads of several statements answer from one state of the store: a writer that commits
between two of them is seen by none or by all."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import trio

from forged.models import Correction, NewFact
from forged.recall import listing
from forged.store.backend import Backend
from forged.store.common import read_log
from forged.store.sqlite import register_functions
from tests.conftest import StoreOpener
from tests.support import daemons
from tests.support.data import new

Hook = Callable[[], Awaitable[Any]]


class _SqliteReader(sqlite3.Connection):
    """A reader that runs `hook` on the event loop once a statement holding `after` has read
    (with `before`: just before such a statement runs)."""

    after: str = ""
    before: bool = False
    hook: Hook | None = None

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if self.before:
            _hooked(self, sql)
        cursor = super().execute(sql, *args)
        _hooked(self, sql)
        return cursor


class _PostgresReader(psycopg.Connection[Any]):
    """The same on PostgreSQL."""

    after: str = ""
    before: bool = False
    hook: Hook | None = None

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        if self.before:
            _hooked(self, str(query))
        cursor = super().execute(query, *args, **kwargs)
        _hooked(self, str(query))
        return cursor


def _hooked(reader: _SqliteReader | _PostgresReader, sql: str) -> None:
    if reader.hook is not None and reader.after in sql:
        hook, reader.hook = reader.hook, None
        trio.from_thread.run(hook)


def _reader(
    store: Backend, after: str, hook: Hook, *, before: bool = False
) -> _SqliteReader | _PostgresReader:
    """A connection to the store's database whose read of `after` lets `hook` write first
    (with `before`, before that read)."""
    reader: _SqliteReader | _PostgresReader
    if daemons.STORE_URL:
        reader = _PostgresReader.connect(daemons.STORE_URL, autocommit=True)
    else:
        reader = sqlite3.connect(
            store.path, factory=_SqliteReader, isolation_level=None, check_same_thread=False
        )
        register_functions(reader)
    reader.after, reader.hook, reader.before = after, hook, before
    return reader


async def test_a_facts_audit_is_read_from_one_state(open_store: StoreOpener) -> None:
    """A correction commits after the fact was read, before its trail: the audit shows the
    fact as it was, not current beside the change that retired it."""
    store = open_store()
    fact_id = (await store.add_fact(NewFact("Mia lives in Lisbon.", scope="s"), None)).fact.id

    async def corrected() -> None:
        await store.correct_fact(fact_id, Correction("Mia lives in Porto."))

    reader = _reader(store, "FROM facts WHERE id", corrected)
    try:
        audit = await trio.to_thread.run_sync(listing.fact_audit, reader, fact_id)
        assert audit is not None and reader.hook is None  # the correction came in between
        assert (audit.fact.superseded_by, audit.replaced_by) == (None, None)
        later = await trio.to_thread.run_sync(listing.fact_audit, reader, fact_id)
        assert later is not None and later.replaced_by is not None
        assert later.fact.superseded_by == later.replaced_by.fact.id
    finally:
        reader.close()
        store.close()


async def test_the_scopes_are_counted_in_one_state(open_store: StoreOpener) -> None:
    """A scope's first turn and fact commit after the turns were counted, before the facts:
    the listing shows the scope whole or not at all (it showed a fact and no turn)."""
    store = open_store()
    await store.append([[new("Mia lives in Lisbon.")]])

    async def started() -> None:
        await store.append([[new("Tom moved to Porto.", scope="t")]])
        await store.add_fact(NewFact("Tom lives in Porto.", scope="t"), None)

    reader = _reader(store, "FROM interactions", started)
    try:
        scopes = await trio.to_thread.run_sync(listing.list_scopes, reader)
        assert reader.hook is None  # the scope started in between
        assert [(s.scope, s.interactions, s.facts) for s in scopes] == [("s", 1, 0)]
        again = await trio.to_thread.run_sync(listing.list_scopes, reader)
        assert sorted((s.scope, s.interactions, s.facts) for s in again) == [
            ("s", 1, 0),
            ("t", 1, 1),
        ]
    finally:
        reader.close()
        store.close()


async def test_a_read_of_the_log_whose_turns_were_erased_reads_past_them(
    open_store: StoreOpener,
) -> None:
    """The log is read in two statements (the turns' sizes, then the turns): turns erased
    between them are passed, and the read goes on to the turns after. It answered none, which
    tells a feeder the log holds nothing more, and the feeder passed the turns after for good."""
    store = open_store()
    await store.append([[new("one", scope="a"), new("two", scope="a"), new("three", scope="b")]])

    async def erased() -> None:
        for seq in (1, 2):
            await store.delete("interaction", seq)

    reader = _reader(store, "AND seq <= ", erased, before=True)
    try:
        read = await trio.to_thread.run_sync(read_log, reader, 0, 2)
        assert reader.hook is None  # the turns went in between
        assert [t.seq for t in read] == [3]
    finally:
        reader.close()
        store.close()
