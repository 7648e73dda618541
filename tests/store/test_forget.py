"""Forgetting a scope: every row and index entry goes, and the text leaves the database files."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import tantivy
import trio

from forged.config import Config, load_config
from forged.daemon.runner import Running
from forged.recall.fulltext import scope_token
from tests.support import daemons
from tests.support.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.support.data import connect, rows, store_files
from tests.support.fakellm import FakeLLM
from tests.support.observers import Recorder

SECRET_WORD = "Zanzibarquokka"  # what the forgotten scope talked about
KEPT_WORD = "Keepsakewombat"  # what the other scope talked about
POISON = "Poisonpill"  # the fake LLM cannot distil this one: it becomes a dead letter
# Tables that hold no scope's rows (llm_modes: which structured-output mode a server takes).
# interaction_blocks holds a time per 4,096 seqs of every scope, taken again from the turns left
# after a forget (test_recall.test_forgetting_takes_each_block_s_latest_time_from_what_is_left).
NOT_PER_SCOPE = {
    "watermarks",
    "schema_migrations",
    "sqlite_sequence",
    "llm_modes",
    "interaction_blocks",
    "embed_progress",  # the embed observer's last fact and summary ids, like its watermark
}


def said(n: int, scope: str, word: str) -> dict[str, Any]:
    return {
        "id": f"{scope}-{n}",
        "scope": scope,
        "session": "chat",
        "messages": [
            {"role": "user", "text": f"{word} number {n} is what we discussed."},
            {"role": "assistant", "text": f"Noted: {word} {n}."},
        ],
    }


def count(db: str, sql: str, *args: Any) -> int:
    return int(rows(db, sql, *args)[0][0])


def traces(db: str, scope: str, seqs: list[int], words: list[str]) -> dict[str, int]:
    """Rows of every table that belong to the scope's `seqs`, and index entries for `words`.

    Every table is looked at, so a table added later is checked too: one holding a scope's
    rows names its scope or its seq, or this says that it cannot tell.
    """
    if daemons.STORE_URL:
        return pg_traces(scope, seqs, words)
    found: dict[str, int] = {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        tables = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
        fts = [name for name, sql in tables if "using fts5" in sql.lower()]
        for name, _ in tables:
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({name})")}
            seq = next((c for c in ("first_seq", "seq") if c in columns), None)
            if name in fts:
                sql = f"SELECT count(*) FROM {name} WHERE {name} MATCH ?"
                found[name] = sum(conn.execute(sql, (f'"{w}"',)).fetchone()[0] for w in words)
            elif name in NOT_PER_SCOPE or any(name.startswith(f"{f}_") for f in fts):
                continue
            elif "scope" in columns:
                where = "scope = ?" + (f" AND {seq} <= {max(seqs)}" if seq else "")
                found[name] = conn.execute(
                    f"SELECT count(*) FROM {name} WHERE {where}", (scope,)
                ).fetchone()[0]
            elif seq is not None:
                marks = ", ".join("?" * len(seqs))
                sql = f"SELECT count(*) FROM {name} WHERE {seq} IN ({marks})"
                found[name] = conn.execute(sql, seqs).fetchone()[0]
            else:
                raise AssertionError(f"{name} has no scope and no seq: how is it forgotten?")
    return found


def pg_traces(scope: str, seqs: list[int], words: list[str]) -> dict[str, int]:
    """`traces` on PostgreSQL: every table holds its scope, and its search column is in the row."""
    tables = rows(
        "",
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
    )
    found: dict[str, int] = {}
    for (name,) in tables:
        if name in NOT_PER_SCOPE:
            continue
        columns = {
            c
            for (c,) in rows(
                "", "SELECT column_name FROM information_schema.columns WHERE table_name = ?", name
            )
        }
        if "scope" not in columns:
            raise AssertionError(f"{name} has no scope: how is it forgotten, or sharded?")
        seq = next((c for c in ("first_seq", "seq") if c in columns), None)
        where = "scope = ?" + (f" AND {seq} <= {max(seqs)}" if seq else "")
        found[name] = rows("", f"SELECT count(*) FROM {name} WHERE {where}", scope)[0][0]
        if "search" in columns:  # the full-text index entries live in the rows themselves
            found[f"{name}_fts"] = sum(  # named as the SQLite index, for the same checks
                rows(
                    "",
                    f"SELECT count(*) FROM {name} WHERE search @@ plainto_tsquery('english', ?)",
                    w,
                )[0][0]
                for w in words
            )
    return found


def matching_turns(db: str, word: str) -> int:
    """Interactions the full-text index finds for `word`."""
    if daemons.STORE_URL:
        sql = "SELECT count(*) FROM interactions WHERE search @@ plainto_tsquery('english', ?)"
    else:
        sql = "SELECT count(*) FROM interactions_fts WHERE interactions_fts MATCH ?"
    return count(db, sql, word)


def index_terms(directory: Path, field: str, prefix: str) -> list[tuple[str, int]]:
    """The terms of a field of the turn index's files that start with `prefix`, as tantivy
    reads them from its term dictionary (compressed on disk: no byte search can find them)."""
    return list(tantivy.Index.open(str(directory)).searcher().terms_with_prefix(field, prefix))


def database_bytes(db: str) -> bytes:
    """Every byte of the database, its WAL, its shared-memory index and the turn index's
    directory beside it (every file in it), as they are on disk."""
    return b"".join(f.read_bytes() for f in store_files(db))


@pytest.fixture
async def distilled(
    short_tmp: Path, fake_llm: FakeLLM
) -> AsyncIterator[tuple[Config, Running, httpx.AsyncClient]]:
    """A daemon holding two distilled scopes; "secret" also has a dead letter."""
    fake_llm.poison = POISON
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    pushed = [said(n, "secret", SECRET_WORD) for n in range(6)] + [said(9, "secret", POISON)]
    pushed += [said(n, "kept", KEPT_WORD) for n in range(6)]
    with trio.fail_after(60):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            assert (await client.post("/v1/interactions", json=pushed)).status_code == 202
            await wait_for_watermark(client, len(pushed), hub=api.hub)
            yield config, api, client


async def test_forget_answers_what_it_erased(
    distilled: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """The answer counts the scope's interactions, summaries and facts."""
    config, _, client = distilled
    db = config.store.path
    summaries = count(db, "SELECT count(*) FROM summaries WHERE scope = ?", "secret")
    response = await client.delete("/v1/scopes/secret")
    assert response.status_code == 200, response.text
    assert response.json() == {"deleted": {"interactions": 7, "summaries": summaries, "facts": 6}}


async def test_forget_erases_every_row_of_the_scope_and_only_it(
    distilled: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """Every table's rows and index entries of the scope go; the other scope's stay."""
    config, _, client = distilled
    db = config.store.path
    secret = traces(db, "secret", list(range(1, 8)), [SECRET_WORD, POISON])
    kept = traces(db, "kept", list(range(8, 14)), [KEPT_WORD])
    assert secret["dead_letters"] == 1
    assert min(secret[t] for t in ("interactions", "summaries", "facts", "distill_runs")) > 0
    assert secret["facts_fts"] > 0  # summaries do not quote the words; facts do
    await client.delete("/v1/scopes/secret")
    assert traces(db, "secret", list(range(1, 8)), [SECRET_WORD, POISON]) == dict.fromkeys(
        secret, 0
    )
    assert traces(db, "kept", list(range(8, 14)), [KEPT_WORD]) == kept


async def test_forget_takes_the_erased_work_out_of_the_status_totals(
    distilled: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """/v1/status counts the batches, calls and tokens left on disk, as a restart would."""
    _, api, client = distilled
    before = (await client.get("/v1/status")).json()["observers"][0]
    await client.delete("/v1/scopes/secret")
    after = (await client.get("/v1/status")).json()["observers"][0]
    on_disk = msgspec.to_builtins(await api.store.observer_totals("distill"))
    totals = ("batches", "llm_calls", "prompt_tokens", "completion_tokens", "dead_letters")
    assert {k: after[k] for k in totals} == {k: on_disk[k] for k in totals}
    assert (after["llm_calls"], after["dead_letters"]) < (before["llm_calls"], 1)


async def test_forgotten_memory_is_not_found_again(
    distilled: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """After forgetting, search finds nothing of the scope, and the index holds no stale rows."""
    config, _, client = distilled
    params = {"q": SECRET_WORD, "scope": "secret"}
    assert len((await client.get("/v1/search", params=params)).json()["results"]) > 0
    await client.delete("/v1/scopes/secret")
    assert (await client.get("/v1/search", params=params)).json() == {"results": []}
    if daemons.STORE_URL:
        return  # PostgreSQL's search columns are in the rows: nothing to fall out of step
    with connect(config.store.path) as conn:
        for table in ("facts_fts", "summaries_fts"):  # an index agreeing with its content table
            conn.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', 1)")


async def test_forgotten_turns_leave_the_interaction_index(
    distilled: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """The scope's turns leave the interactions' full-text index; the other scope's stay."""
    config, _, client = distilled
    params = {"q": SECRET_WORD, "scope": "secret", "types": "interaction"}
    assert len((await client.get("/v1/search", params=params)).json()["results"]) == 6
    await client.delete("/v1/scopes/secret")
    assert (await client.get("/v1/search", params=params)).json() == {"results": []}
    assert matching_turns(config.store.path, SECRET_WORD) == 0
    assert matching_turns(config.store.path, KEPT_WORD) == 6


@pytest.mark.sqlite_only  # PostgreSQL: the README says what stays on disk until autovacuum
async def test_forget_leaves_no_trace_in_the_file_bytes(
    distilled: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """The erased text is in neither forged.db, -wal, -shm nor the turn index's files; the other
    scope's text still is."""
    config, running, client = distilled
    assert running.turn_index is not None
    await running.turn_index.wait_settled()
    before = database_bytes(config.store.path)
    scope_term = scope_token("secret")[2:].encode()  # past what a neighbour term may share
    assert SECRET_WORD.encode() in before and scope_term in before  # the check below could fail
    index = config.index.directory(config.store)
    assert index_terms(index, "text", SECRET_WORD.lower()[:8]) and index_terms(
        index, "scope", "secret"
    )
    await client.delete("/v1/scopes/secret")
    await running.turn_index.wait_settled()
    assert index_terms(index, "text", SECRET_WORD.lower()[:8]) == []  # rewritten without them
    assert index_terms(index, "scope", "secret") == []
    assert index_terms(index, "text", KEPT_WORD.lower()[:8])
    after = database_bytes(config.store.path)
    for form in (SECRET_WORD, SECRET_WORD.lower(), SECRET_WORD[1:-1].lower(), POISON.lower()):
        assert form.encode() not in after, form
    assert scope_term not in after  # the scope's token left the full-text indexes
    assert KEPT_WORD.encode() in after


async def test_forget_updates_the_log_count(
    distilled: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """/v1/status counts only the interactions left; the last seq stays where it was."""
    _, _, client = distilled
    await client.delete("/v1/scopes/secret")
    log = (await client.get("/v1/status")).json()["log"]
    assert log == {"last_seq": 13, "count": 6}


async def test_forgetting_an_unknown_scope_erases_nothing(
    distilled: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """A scope with no memory answers zeros; nothing else is touched."""
    config, _, client = distilled
    response = await client.delete("/v1/scopes/nobody")
    assert response.json() == {"deleted": {"interactions": 0, "summaries": 0, "facts": 0}}
    assert count(config.store.path, "SELECT count(*) FROM interactions") == 13


async def test_a_scope_with_slashes_and_colons_is_forgotten(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """The scope is the whole rest of the path, percent-decoded."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    scope = "team:a/b c"
    with trio.fail_after(30):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            await client.post("/v1/interactions", json=said(1, scope, SECRET_WORD))
            await wait_for_watermark(client, 1)
            response = await client.delete("/v1/scopes/team:a%2Fb%20c")
    assert response.json()["deleted"]["interactions"] == 1


async def test_forget_needs_delete(distilled: tuple[Config, Running, httpx.AsyncClient]) -> None:
    """GET on a scope's path is a 405 that says DELETE is the method."""
    _, _, client = distilled
    response = await client.get("/v1/scopes/secret")
    assert response.status_code == 405
    assert response.json()["error"]["message"] == "/v1/scopes/secret accepts DELETE"


async def _queued(api: Running, seq: int, observer: str = "distill") -> None:
    """Return once the hub has put `seq` into the observer's queue."""
    while api.hub.feeds[observer].sent < seq:
        await api.hub.changed()


async def test_a_batch_in_flight_brings_nothing_back(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """Forgetting a scope while its batch is with the LLM: nothing of the late answer is stored."""
    fake_llm.gate = trio.Event()
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            await client.post(
                "/v1/interactions", json=[said(n, "gone", SECRET_WORD) for n in range(3)]
            )
            await fake_llm.wait_for_calls(1)
            assert (await client.delete("/v1/scopes/gone")).status_code == 200
            fake_llm.gate.set()
            status = await wait_for_watermark(client, 3)
            on_disk = msgspec.to_builtins(await api.store.observer_totals("distill"))
    left = traces(config.store.path, "gone", [1, 2, 3], [SECRET_WORD])
    assert left == dict.fromkeys(left, 0)  # every table and index of the scope is empty
    (distill,) = status["observers"]
    assert (distill["llm_calls"], distill["batches"]) == (on_disk["llm_calls"], 0)


async def test_what_was_queued_when_a_scope_was_forgotten_does_not_come_back(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """A in flight, B1 queued, forget, then B2: only B2 is distilled into the scope again."""
    fake_llm.gate = trio.Event()
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            await client.post("/v1/interactions", json=said(1, "fz", "Alphaquokka"))
            await fake_llm.wait_for_calls(1)
            await client.post("/v1/interactions", json=said(2, "fz", SECRET_WORD))
            await _queued(api, 2)
            assert (await client.delete("/v1/scopes/fz")).json()["deleted"]["interactions"] == 2
            await client.post("/v1/interactions", json=said(3, "fz", KEPT_WORD))
            await _queued(api, 3)
            fake_llm.gate.set()
            await wait_for_watermark(client, 3)
            facts = (await client.get("/v1/facts", params={"scope": "fz"})).json()["facts"]
            found = await client.get("/v1/search", params={"q": SECRET_WORD, "scope": "fz"})
    assert [(f["first_seq"], f["last_seq"]) for f in facts] == [(3, 3)]
    assert KEPT_WORD in facts[0]["text"]
    assert found.json() == {"results": []}
    left = traces(config.store.path, "fz", [1, 2], [SECRET_WORD, "Alphaquokka"])
    assert set(left.values()) == {0}


async def test_no_observer_sees_what_was_queued_before_a_forget(
    short_tmp: Path, fake_llm: FakeLLM, recorder: type[Recorder]
) -> None:
    """A plugin holding back: the forgotten scope's queued interactions never reach it."""
    config = load_config(
        write_config(
            short_tmp,
            fake_llm.base_url,
            distill={"enabled": False},
            observers={"recorder": {"class": "tests.support.observers:Recorder"}},
        ),
        {},
    )
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            pushed = [said(1, "fz", SECRET_WORD), said(2, "kept", KEPT_WORD)]
            await client.post("/v1/interactions", json=[*pushed, said(3, "fz", SECRET_WORD)])
            await _queued(api, 3, "recorder")
            await client.delete("/v1/scopes/fz")
            await client.post("/v1/interactions", json=said(4, "fz", KEPT_WORD))
            recorder.gate.set()
            while api.hub.backlog():
                await api.hub.changed()
    assert recorder.seen == [2, 4]


async def test_forgetting_a_backlog_leaves_none(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """A scope forgotten while its interactions wait, in the queue and in the log: the watermark
    moves over them and no backlog is left."""
    fake_llm.gate = trio.Event()
    config = load_config(
        write_config(short_tmp, fake_llm.base_url, distill={"channel_capacity": 2}), {}
    )
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            await client.post("/v1/interactions", json=said(0, "fz", SECRET_WORD))
            await fake_llm.wait_for_calls(1)
            await client.post(
                "/v1/interactions", json=[said(n, "fz", SECRET_WORD) for n in range(1, 9)]
            )
            await _queued(api, 3)  # two queued, one in the hub's hand, six only in the log
            await client.delete("/v1/scopes/fz")
            fake_llm.gate.set()
            while api.hub.backlog():
                await api.hub.changed()
            (distill,) = (await client.get("/v1/status")).json()["observers"]
    assert (distill["watermark"], distill["backlog"], fake_llm.calls) == (9, 0, 1)
