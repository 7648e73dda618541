"""Forgetting a scope: every row and index entry goes, and the text leaves the database files."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from forged.config import Config, load_config
from forged.daemon import Running
from tests.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.fakellm import FakeLLM

SECRET_WORD = "Zanzibarquokka"  # what the forgotten scope talked about
KEPT_WORD = "Keepsakewombat"  # what the other scope talked about
POISON = "Poisonpill"  # the fake LLM cannot distil this one: it becomes a dead letter
TABLES_BY_SCOPE = {
    "interactions": "SELECT count(*) FROM interactions WHERE scope = ?",
    "summaries": "SELECT count(*) FROM summaries WHERE scope = ?",
    "facts": "SELECT count(*) FROM facts WHERE scope = ?",
    "distill_runs": "SELECT count(*) FROM distill_runs WHERE scope = ?",
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
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute(sql, args).fetchone()[0])


def database_bytes(db: str) -> bytes:
    """Every byte of the database, its WAL and its shared-memory index, as they are on disk."""
    return b"".join(p.read_bytes() for p in sorted(Path(db).parent.glob(Path(db).name + "*")))


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
            await wait_for_watermark(client, len(pushed))
            yield config, api, client


async def test_forget_answers_what_it_erased(
    distilled: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """The answer counts the scope's interactions, summaries and facts."""
    config, _, client = distilled
    db = config.store.path
    summaries = count(db, TABLES_BY_SCOPE["summaries"], "secret")
    response = await client.delete("/v1/scopes/secret")
    assert response.status_code == 200, response.text
    assert response.json() == {"deleted": {"interactions": 7, "summaries": summaries, "facts": 6}}


async def test_forget_erases_every_row_of_the_scope_and_only_it(
    distilled: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """Interactions, summaries, facts, runs and dead letters of the scope go; the other stays."""
    config, _, client = distilled
    db = config.store.path
    assert count(db, "SELECT count(*) FROM dead_letters") == 1
    kept = {table: count(db, sql, "kept") for table, sql in TABLES_BY_SCOPE.items()}
    await client.delete("/v1/scopes/secret")
    assert {
        table: count(db, sql, "secret") for table, sql in TABLES_BY_SCOPE.items()
    } == dict.fromkeys(TABLES_BY_SCOPE, 0)
    assert count(db, "SELECT count(*) FROM dead_letters") == 0
    assert {table: count(db, sql, "kept") for table, sql in TABLES_BY_SCOPE.items()} == kept
    assert min(kept.values()) > 0


async def test_forgotten_memory_is_not_found_again(
    distilled: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """After forgetting, search finds nothing of the scope, and the index holds no stale rows."""
    config, _, client = distilled
    params = {"q": SECRET_WORD, "scope": "secret"}
    assert len((await client.get("/v1/search", params=params)).json()["results"]) > 0
    await client.delete("/v1/scopes/secret")
    assert (await client.get("/v1/search", params=params)).json() == {"results": []}
    with sqlite3.connect(config.store.path) as conn:
        for table in ("facts_fts", "summaries_fts"):  # an index agreeing with its content table
            conn.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', 1)")


async def test_forget_leaves_no_trace_in_the_file_bytes(
    distilled: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """The erased text is in neither forged.db, -wal nor -shm; the other scope's text still is."""
    config, _, client = distilled
    before = database_bytes(config.store.path)
    assert SECRET_WORD.encode() in before  # the check below could fail
    await client.delete("/v1/scopes/secret")
    after = database_bytes(config.store.path)
    for form in (SECRET_WORD, SECRET_WORD.lower(), SECRET_WORD[1:-1].lower(), POISON.lower()):
        assert form.encode() not in after, form
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


async def test_a_batch_in_flight_brings_nothing_back(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """Forgetting a scope while its batch is with the LLM: the late answer is not stored."""
    fake_llm.latency = 0.5
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(30):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            await client.post(
                "/v1/interactions", json=[said(n, "gone", SECRET_WORD) for n in range(3)]
            )
            await fake_llm.wait_for_calls(1)
            assert (await client.delete("/v1/scopes/gone")).status_code == 200
            await wait_for_watermark(client, 3)
    with sqlite3.connect(config.store.path) as conn:
        counts = [conn.execute(sql, ("gone",)).fetchone()[0] for sql in TABLES_BY_SCOPE.values()]
    assert counts[:3] == [0, 0, 0]
