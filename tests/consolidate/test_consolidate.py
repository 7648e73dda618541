"""Consolidation: a conversation in which states change, distilled and consolidated with the fake
LLM; the block shows only what is true now, history and the audit trail show the rest, and a
SIGKILL in the middle of a run applies nothing twice."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio
from structlog.testing import capture_logs

from bench import currentstate
from bench.currentstate import CONVERSATION, SCOPE, gold
from bench.currentstate import interactions as state_changes
from forged.config import load_config
from forged.consolidate.condense import OldSummary, grounded
from forged.consolidate.judgement import (
    CurrentFact,
    checked,
    chunks,
    render_facts,
)
from forged.consolidate.observer import NAME
from forged.models import ConsolidationChange, ConsolidationRun, Fact, Message, Usage
from forged.recall.listing import Page, list_facts
from forged.store.backend import Backend
from forged.store.portable import portable
from forged.store.records import BatchOutcome, NewInteraction, ScopeResult
from forged.store.sqlite import Store
from forged.store.sqlite_schema import MIGRATIONS
from tests.cli.test_recall_cli import Daemon
from tests.conftest import StoreOpener
from tests.daemon.test_loader import example
from tests.support.daemons import (
    DaemonProcess,
    running_daemon,
    socket_client,
    until,
    wait_for_watermark,
    write_config,
)
from tests.support.data import integrity, rows
from tests.support.fakellm import FACTS_OPEN, FakeLLM, consolidation_answer
from tests.support.stub_consolidator import SamePrefix

CURRENT = {
    "The user lives in Berlin.",
    "The service uses Postgres.",
    "The user's name is John.",
    "The user prefers coffee.",
}
# retired fact -> (action, the fact standing in for it, invalid_at day or None for a merge)
RETIRED = {
    "The user lives in Lisbon.": ("supersede", "The user lives in Berlin.", "2026-03-03"),
    "The service uses MySQL.": ("merge", "The service uses MySQL for storage.", None),
    "The service uses MySQL for storage.": (
        "supersede",
        "The service uses Postgres.",
        "2026-03-03",
    ),
    "The user's name is Jon.": ("supersede", "The user's name is John.", "2026-03-04"),
    "The user prefers tea.": ("supersede", "The user prefers coffee.", "2026-03-05"),
}
QUESTIONS = "where does the user live, which database does the service use, name, prefers"


def _config(tmp: Path, llm: FakeLLM, **consolidate: Any) -> Path:
    llm.default, llm.gold = "gold", gold()
    settings = {
        "enabled": True,
        "min_new_facts": 1000,
        "check_interval": 0.05,
        "related_facts_tokens": 0,
        **consolidate,
    }
    return write_config(
        tmp, llm.base_url, distill={"max_batch_interactions": 1}, consolidate=settings
    )


async def _distilled(client: httpx.AsyncClient, scope: str = SCOPE) -> None:
    response = await client.post("/v1/interactions", json=state_changes(scope))
    assert response.status_code == 202, response.text
    await wait_for_watermark(client, response.json()["last_seq"])


async def _facts(client: httpx.AsyncClient, history: bool = False) -> dict[str, dict[str, Any]]:
    params = {"scope": SCOPE, **({"history": "true"} if history else {})}
    return {f["text"]: f for f in (await client.get("/v1/facts", params=params)).json()["facts"]}


async def _current(client: httpx.AsyncClient) -> bool:
    """Whether the scope's current facts are those of the conversation's end."""
    return set(await _facts(client)) == CURRENT


async def test_consolidation_keeps_the_current_state_and_the_history(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    config = load_config(_config(short_tmp, fake_llm), {})
    async with running_daemon(config), socket_client(config.server.socket) as client:
        await _distilled(client)
        assert len(await _facts(client)) == len(CONVERSATION)  # all current until consolidated

        response = await client.post("/v1/consolidate", params={"scope": SCOPE})
        assert response.status_code == 200, response.text
        (run,) = response.json()["runs"]
        assert (run["facts"], len(run["changes"]), run["usage"]["calls"]) == (9, 5, 1)

        block = (
            await client.get(
                "/v1/context", params={"q": QUESTIONS, "scope": SCOPE, "types": "fact"}
            )
        ).json()
        assert {i["text"] for i in block["items"]} == CURRENT
        for gone in ("Lisbon", "MySQL", "Jon.", "tea"):
            assert gone not in block["text"]
        assert set(await _facts(client)) == CURRENT

        history = await _facts(client, history=True)
        assert set(history) == CURRENT | set(RETIRED)
        for text, (action, into, invalid_day) in RETIRED.items():
            fact = history[text]
            assert fact["superseded_by"] == history[into]["id"], text
            assert (fact["invalid_at"] or "")[:10] == (invalid_day or ""), text
            assert fact["valid_from"] == fact["first_at"]
            audit = (await client.get(f"/v1/facts/{fact['id']}", params={"scope": SCOPE})).json()
            change = audit["replaced_by"]
            assert (change["action"], change["fact"]["text"]) == (action, into)
            assert change["reason"] and change["run_id"] == run["run_id"]
        berlin = (
            await client.get(
                f"/v1/facts/{history['The user lives in Berlin.']['id']}", params={"scope": SCOPE}
            )
        ).json()
        assert [c["fact"]["text"] for c in berlin["replaced"]] == ["The user lives in Lisbon."]
        assert berlin["replaced_by"] is None
        kept = history["The service uses MySQL for storage."]
        assert kept["seen_count"] == 2  # the merged duplicate's mention counts
        assert kept["first_at"][:10] == "2026-03-01"  # and its dates: said since day one

        searched = await client.get(
            "/v1/search", params={"q": "Lisbon Berlin", "scope": SCOPE, "history": "true"}
        )
        dated = {r["text"]: r for r in searched.json()["results"] if r["type"] == "fact"}
        assert dated["The user lives in Lisbon."]["invalid_at"].startswith("2026-03-03")
        assert "superseded_by" not in dated["The user lives in Berlin."]
        block = await client.get(
            "/v1/context", params={"q": "Lisbon", "scope": SCOPE, "history": "true"}
        )
        berlin_id = history["The user lives in Berlin."]["id"]
        assert (
            f"superseded 2026-03-03 by #{berlin_id}] The user lives in Lisbon."
            in (block.json()["text"])
        )

        status = (await client.get("/v1/status")).json()
        mine = next(o for o in status["observers"] if o["name"] == "consolidate")
        assert (mine["batches"], mine["llm_calls"]) == (1, 1)
        assert mine["prompt_tokens"] > 0

        again = (await client.post("/v1/consolidate", params={"scope": SCOPE})).json()
        assert again["runs"][0]["changes"] == []  # what is current now holds


# With supersession at distillation: what a newer fact replaced as it was distilled (its
# words found the old one), then what consolidation retired (the move shares no word).
AT_DISTILLATION = {
    "The service uses MySQL.": "The service uses Postgres.",
    "The service uses MySQL for storage.": "The service uses Postgres.",
    "The user's name is Jon.": "The user's name is John.",
    "The user prefers tea.": "The user prefers coffee.",
}


async def test_a_new_state_replaces_what_it_contradicts_as_it_is_distilled(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Then consolidation retires the rest: only the current state is in the block, history
    has every fact dated, and each retired fact's audit trail says what replaced it and why."""
    config = load_config(_config(short_tmp, fake_llm, related_facts_tokens=400), {})
    async with running_daemon(config), socket_client(config.server.socket) as client:
        await _distilled(client)
        assert set(await _facts(client)) == CURRENT | {"The user lives in Lisbon."}
        known = [r for r in fake_llm.requests if "<known_facts>" in str(r["messages"])]
        assert known  # the distiller was shown the scope's facts beside the transcript
        history = await _facts(client, history=True)
        for old, new in AT_DISTILLATION.items():
            audit = (
                await client.get(f"/v1/facts/{history[old]['id']}", params={"scope": SCOPE})
            ).json()
            change = audit["replaced_by"]
            assert (change["action"], change["fact"]["text"]) == ("supersede", new)
            assert change["reason"].startswith("replaced by a newer ")
            assert audit["fact"]["invalid_at"][:10] == history[new]["first_at"][:10]

        response = await client.post("/v1/consolidate", params={"scope": SCOPE})
        (run,) = response.json()["runs"]
        assert [(c["fact_id"], c["into_id"]) for c in run["changes"]] == [
            (history["The user lives in Lisbon."]["id"], history["The user lives in Berlin."]["id"])
        ]
        block = (
            await client.get(
                "/v1/context", params={"q": QUESTIONS, "scope": SCOPE, "types": "fact"}
            )
        ).json()
        assert {i["text"] for i in block["items"]} == CURRENT
        history = await _facts(client, history=True)
        assert set(history) == CURRENT | set(RETIRED)
        assert all(history[t]["invalid_at"] for t in RETIRED)  # each dated when it stopped


async def test_old_summaries_are_condensed_into_one(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """All but the newest `keep_summaries` become one summary, dated by them all, audited."""
    config = load_config(_config(short_tmp, fake_llm, keep_summaries=2), {})
    async with running_daemon(config), socket_client(config.server.socket) as client:
        await _distilled(client)
        before = (await client.get("/v1/summaries", params={"scope": SCOPE})).json()["summaries"]
        assert len(before) == len(CONVERSATION)
        (run,) = (await client.post("/v1/consolidate", params={"scope": SCOPE})).json()["runs"]
        condensed = [c for c in run["changes"] if c["action"] == "condense"]
        assert [c["fact_id"] for c in condensed] == [s["id"] for s in before[:-2]]
        assert run["usage"]["calls"] == 2  # one for the facts, one for the summaries
        now = (await client.get("/v1/summaries", params={"scope": SCOPE})).json()["summaries"]
        assert [s["id"] for s in now[:2]] == [s["id"] for s in before[-2:]]
        new = now[2]
        assert {c["into_id"] for c in condensed} == {new["id"]}
        assert new["text"] == " ".join(s["text"] for s in before[:-2])  # the fake's condensation
        assert (new["first_at"], new["last_at"]) == (before[0]["first_at"], before[-3]["last_at"])
        assert (new["first_seq"], new["last_seq"]) == (
            before[0]["first_seq"],
            before[-3]["last_seq"],
        )
        params = {"scope": SCOPE, "history": "true"}
        every = (await client.get("/v1/summaries", params=params)).json()["summaries"]
        assert [s["condensed_into"] for s in every[:-3]] == [new["id"]] * (len(before) - 2)
        block = await client.get(
            "/v1/context", params={"q": "Lisbon", "scope": SCOPE, "types": "summary"}
        )
        assert [i["id"] for i in block.json()["items"]] == [new["id"]]
        again = (await client.post("/v1/consolidate", params={"scope": SCOPE})).json()["runs"]
        assert not [c for c in again[0]["changes"] if c["action"] == "condense"]  # 3 left: kept
    db = config.store.path
    assert rows(
        db,
        "SELECT count(*) FROM consolidation_changes WHERE action = 'condense' AND run_id = ?",
        run["run_id"],
    ) == [(len(before) - 2,)]


def test_a_condensation_must_say_only_what_its_summaries_say() -> None:
    old = [
        OldSummary(1, "Ana moved to Berlin on 3 March 2026.", "2026-03-03T10:00:00Z", "x"),
        OldSummary(2, "The service uses Postgres since March.", "2026-03-04T10:00:00Z", "x"),
    ]
    assert grounded("Ana moved to Berlin; the service uses Postgres.", old).grounded
    invented = grounded("Ana adopted a cat named Zorro in 2019.", old)
    assert invented.reason == "names not in the sources: zorro"


async def test_a_scope_that_gains_facts_is_consolidated_on_its_own(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    config = load_config(_config(short_tmp, fake_llm, min_new_facts=len(CONVERSATION)), {})
    async with running_daemon(config) as api, socket_client(config.server.socket) as client:
        await _distilled(client)
        with trio.fail_after(10):
            await until(api.hub, lambda: _current(client))
        assert (await client.post("/v1/consolidate")).json() == {"runs": []}  # none is due


async def test_facts_a_run_cannot_check_are_not_changed() -> None:
    """Grounding: unknown ids, self-replacement, older-for-newer, unrelated merges are refused."""
    facts = [
        CurrentFact(1, "state", "The user lives in Lisbon.", "2026-03-01T10:00:00.000Z"),
        CurrentFact(2, "state", "The user lives in Berlin.", "2026-03-03T10:00:00.000Z"),
        CurrentFact(3, "preference", "The user prefers tea.", "2026-03-02T10:00:00.000Z"),
    ]
    from forged.consolidate.judgement import ProposedChange

    proposed = [
        ProposedChange("supersede", 2, 1, "older for newer"),
        ProposedChange("supersede", 1, 9, "unknown id"),
        ProposedChange("merge", 3, 3, "itself"),
        ProposedChange("merge", 3, 2, "unrelated"),
        ProposedChange("supersede", 1, 2, "moved"),
        ProposedChange("merge", 1, 2, "already retired"),
    ]
    kept = checked(proposed, facts, set(), 300)
    assert [(c.action, c.fact_id, c.into_id) for c in kept] == [("supersede", 1, 2)]


def test_chunks_fit_the_call_size_and_the_token_budget() -> None:
    facts = [CurrentFact(n, "state", f"Fact number {n} " * 8, "2026") for n in range(10)]
    assert [len(c) for c in chunks(facts, 4, 10_000)] == [4, 4, 2]
    assert all(len(c) == 1 for c in chunks(facts, 4, 10))  # one long fact alone still goes


def test_the_fake_consolidates_what_is_listed() -> None:
    facts = [
        CurrentFact(n, "state", text, day)
        for n, (day, _, _, text) in enumerate(CONVERSATION, start=1)
    ]
    body = {"messages": [{"role": "user", "content": render_facts(facts)}]}
    assert FACTS_OPEN in render_facts(facts)
    changes = consolidation_answer(body)["changes"]
    assert {(c["action"], c["fact"], c["into"]) for c in changes} == {
        ("supersede", 1, 7),
        ("merge", 2, 5),
        ("supersede", 5, 6),
        ("supersede", 3, 8),
        ("supersede", 4, 9),
    }


async def test_consolidate_needs_the_observer(short_tmp: Path, fake_llm: FakeLLM) -> None:
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    async with running_daemon(config), socket_client(config.server.socket) as client:
        response = await client.post("/v1/consolidate")
        assert response.status_code == 409
        assert response.json()["error"]["message"] == (
            "the consolidate observer is not running; set [consolidate] enabled = true"
        )
        missing = await client.get("/v1/facts/12345")
        assert missing.status_code == 404
        assert missing.json()["error"]["message"] == "no fact with id '12345'"
        bad = await client.get("/v1/facts/x1")
        assert bad.json()["error"]["message"] == "no fact with id 'x1'"


@pytest.mark.slow
async def test_sigkill_in_the_middle_of_a_run_applies_nothing_twice(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Three calls per run (two chunks of facts, the summaries): the daemon dies while the
    second is answered, after the first was; the run done again applies everything once."""
    config = _config(short_tmp, fake_llm, facts_per_call=5, keep_summaries=2)
    async with DaemonProcess(config, short_tmp) as daemon:
        await daemon.start()
        async with socket_client(daemon.socket) as client:
            await _distilled(client)
        calls = fake_llm.calls
        first, fake_llm.gate = trio.Event(), trio.Event()
        second, fake_llm.gate = fake_llm.gate, first
        async with trio.open_nursery() as nursery:

            async def consolidate() -> None:
                async with socket_client(daemon.socket) as client:
                    with pytest.raises(httpx.TransportError):  # the daemon dies under it
                        await client.post("/v1/consolidate", params={"scope": SCOPE})

            nursery.start_soon(consolidate)
            await fake_llm.wait_until(lambda llm: llm.in_flight == 1 and llm.calls == calls + 1)
            fake_llm.gate = second
            first.set()  # the first chunk is answered; the second waits
            await fake_llm.wait_until(lambda llm: llm.in_flight == 1 and llm.calls == calls + 2)
            assert all(FACTS_OPEN in str(r["messages"]) for r in fake_llm.requests[calls:])
            await daemon.kill()
        db = daemon.config.store.path
        assert rows(db, "SELECT count(*) FROM consolidation_changes") == [(0,)]
        assert rows(db, "SELECT count(*) FROM facts WHERE superseded_by IS NOT NULL") == [(0,)]
        fake_llm.gate = None
        await daemon.start()
        async with socket_client(daemon.socket) as client:
            response = await client.post("/v1/consolidate", params={"scope": SCOPE})
            assert response.status_code == 200, response.text
            assert set(await _facts(client)) == CURRENT
            status = (await client.get("/v1/status")).json()
        assert await daemon.stop() == 0
    changes = rows(
        db,
        "SELECT fact_id, count(*) FROM consolidation_changes"
        " WHERE action != 'condense' GROUP BY fact_id",
    )
    assert sorted(n for _, n in changes) == [1] * len(RETIRED)
    assert rows(
        db, "SELECT seen_count FROM facts WHERE text = ?", "The service uses MySQL for storage."
    ) == [(2,)]
    assert rows(db, "SELECT count(*) FROM consolidation_runs") == [(1,)]
    mine = next(o for o in status["observers"] if o["name"] == "consolidate")
    assert mine["llm_calls"] == 3  # two for the facts, one for the summaries; none killed
    condensed = rows(db, "SELECT count(*) FROM consolidation_changes WHERE action = 'condense'")
    assert condensed == [(len(CONVERSATION) - 2,)]
    assert rows(db, "SELECT count(*) FROM summaries WHERE observer = ?", NAME) == [(1,)]
    assert integrity(db) == "ok"


async def test_the_command_line_consolidates_and_shows_history(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    config = load_config(_config(short_tmp, fake_llm), {})
    async with running_daemon(config) as api, socket_client(config.server.socket) as client:
        await _distilled(client)
        cli = Daemon(config, api, client)
        done = await cli.forged("consolidate", "--scope", SCOPE)
        assert done.returncode == 0, done.stderr
        assert len(json.loads(done.stdout)["runs"][0]["changes"]) == len(RETIRED)
        current = (await cli.forged("facts", "--scope", SCOPE)).stdout.decode()
        assert "Lisbon" not in current and "Berlin" in current
        history = (await cli.forged("facts", "--scope", SCOPE, "--history")).stdout.decode()
        berlin = (await _facts(client))["The user lives in Berlin."]["id"]
        (lisbon,) = [line for line in history.splitlines() if "Lisbon" in line]
        assert lisbon.endswith(
            f"The user lives in Lisbon.  [superseded 2026-03-03 by #{berlin}:"
            f" replaced on 2026-03-03 by fact {berlin}]"
        )
        audit = json.loads(
            (await cli.forged("fact", str(berlin), "--scope", SCOPE, "--json")).stdout
        )
        assert audit["replaced"][0]["fact"]["text"] == "The user lives in Lisbon."
        missing = await cli.forged("fact", "999")
        assert missing.returncode != 0
        assert (
            missing.stderr.decode()
            .strip()
            .endswith(
                "no fact 999 in scope 'default'; name its scope with --scope S, or look in every scope with --all-scopes"
            )
        )


def _said(text: str, at: str) -> NewInteraction:
    messages = msgspec.json.encode([Message(role="user", text=text)])
    return NewInteraction(None, "s", None, at, at, 3, messages, None)


async def _distil(store: Backend, seq: int, kind: str, text: str) -> None:
    fact = Fact(kind=kind, text=text)  # type: ignore[arg-type]
    result = ScopeResult(f"b{seq}", "s", None, text, [fact], seq, seq)
    await store.commit_batch("distill", BatchOutcome([result], [], [], None))  # no lease here


async def test_a_superseded_fact_said_again_later_is_current_again(
    open_store: StoreOpener,
) -> None:
    """Back to Lisbon: the fact stated after it stopped being true holds again, from then on."""
    store = open_store()
    days = ("2026-03-01T10:00:00.000Z", "2026-03-03T10:00:00.000Z", "2026-03-09T10:00:00.000Z")
    await store.append(
        [[_said(t, at) for t, at in zip(("Lisbon", "Berlin", "Lisbon"), days, strict=True)]]
    )
    await _distil(store, 1, "state", "The user lives in Lisbon.")
    await _distil(store, 2, "state", "The user lives in Berlin.")
    change = ConsolidationChange("supersede", 1, 2, "moved")
    run = ConsolidationRun("r1", "m", "s", 2, 2, [change], Usage())
    assert await store.commit_consolidation(NAME, run) == [change]
    assert await store.commit_consolidation(NAME, run) == []  # applied once only
    await _distil(store, 3, "state", "The user lives in Lisbon.")
    sql = "SELECT id, first_at, invalid_at, superseded_by FROM facts ORDER BY id"
    rows = [tuple(r) for r in await store.read(lambda c: portable(c).execute(sql).fetchall())]
    store.close()
    assert rows == [(1, days[2], None, None), (2, days[1], None, None)]


async def test_a_forgotten_scope_takes_its_consolidation_rows_along(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    config = load_config(_config(short_tmp, fake_llm), {})
    async with running_daemon(config), socket_client(config.server.socket) as client:
        await _distilled(client)
        await client.post("/v1/consolidate", params={"scope": SCOPE})
        await client.delete(f"/v1/scopes/{SCOPE}")
        status = (await client.get("/v1/status")).json()
    db = config.store.path
    for table in ("consolidation_changes", "consolidation_runs", "consolidation_progress"):
        assert rows(db, f"SELECT count(*) FROM {table}") == [(0,)], table
    mine = next(o for o in status["observers"] if o["name"] == "consolidate")
    assert (mine["batches"], mine["llm_calls"]) == (0, 0)


def test_migration_keeps_every_fact_current_and_valid_from_its_first_source(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v4.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
        " applied_at TEXT NOT NULL)"
    )
    for version, (name, sql) in enumerate(MIGRATIONS[:4], start=1):
        conn.executescript(sql)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 'x')", (version, name))
    conn.execute(
        "INSERT INTO facts (kind, text, norm, scope, batch_id, first_seq, last_seq,"
        " first_at, last_at, created_at, last_seen_at) VALUES ('state', 'Old.', 'old',"
        " 's', 'b', 1, 1, '2023-05-07T10:00:00.000Z', '2023-05-08T10:00:00.000Z', 'c',"
        " 'c')"
    )
    conn.close()
    store = Store(str(path))
    try:
        page = list_facts(store._reader, Page(scope="s"))
    finally:
        store.close()
    (fact,) = page.facts
    assert (fact.valid_from, fact.invalid_at, fact.superseded_by) == (
        "2023-05-07T10:00:00.000Z",
        None,
        None,
    )


async def test_consolidation_needs_a_distiller_that_can_ask(short_tmp: Path) -> None:
    config = write_config(
        short_tmp,
        "http://127.0.0.1:9/v1",
        distiller={"class": "tests.support.stub_distiller:PreferenceDistiller"},
        consolidate={"enabled": True},
    )
    command = [sys.executable, "-m", "forged", "serve", "--config", str(config)]
    with trio.fail_after(60):
        done = await trio.run_process(command, capture_stderr=True, check=False)
    assert done.returncode == 2
    assert done.stderr.decode().splitlines()[-1] == (
        "forged: config error: consolidate.enabled: the distiller has no async method `ask`,"
        " which consolidation needs; use the OpenAI-compatible client or a consolidate.class"
    )


async def test_a_plugin_named_in_config_consolidates_in_place_of_the_llm(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """`[consolidate] class` proposes; forged checks, applies and audits as for the LLM."""
    SamePrefix.asked.clear()
    plugin = {"class": "tests.support.stub_consolidator:SamePrefix", "settings": {"words": 3}}
    config = load_config(_config(short_tmp, fake_llm, **plugin), {})
    async with running_daemon(config), socket_client(config.server.socket) as client:
        await _distilled(client)
        response = await client.post("/v1/consolidate", params={"scope": SCOPE})
        assert response.status_code == 200, response.text
        (run,) = response.json()["runs"]
        assert set(await _facts(client)) == CURRENT
        history = await _facts(client, history=True)
        for text, (_, into, _) in RETIRED.items():
            into = "The service uses Postgres." if "MySQL" in text else into  # no merge here
            change = (
                await client.get(f"/v1/facts/{history[text]['id']}", params={"scope": SCOPE})
            ).json()["replaced_by"]
            assert (change["action"], change["fact"]["text"]) == ("supersede", into), text
            assert (change["reason"], change["run_id"]) == (
                "same first 3 words, said later",
                run["run_id"],
            )
    assert SamePrefix.asked == [(SCOPE, len(CONVERSATION))]
    assert (run["model"], run["usage"]["calls"], len(run["changes"])) == (
        "tests.support.stub_consolidator:SamePrefix",
        1,
        len(RETIRED),
    )
    assert _consolidation_calls(fake_llm) == 0  # the LLM was not asked to judge the facts


@pytest.mark.parametrize(
    ("cls", "calls", "error"),
    [
        ("Backwards", 1, None),  # refused: a fact superseded by an older one
        (
            "Garbled",
            3,
            "InvalidAnswer: the plugin's answer is not a list of changes: Object"
            " missing required field `fact` - at `$[0]`",
        ),  # asked [distill] max_attempts times
    ],
)
async def test_a_plugins_proposals_meet_forgeds_checks_and_retries(
    short_tmp: Path, fake_llm: FakeLLM, cls: str, calls: int, error: str | None
) -> None:
    config = load_config(
        _config(short_tmp, fake_llm, **{"class": f"tests.support.stub_consolidator:{cls}"}), {}
    )
    async with running_daemon(config), socket_client(config.server.socket) as client:
        await _distilled(client)
        (run,) = (await client.post("/v1/consolidate", params={"scope": SCOPE})).json()["runs"]
        assert (run["changes"], run["usage"]["calls"]) == ([], calls)
        assert len(await _facts(client)) == len(CONVERSATION)
        status = (await client.get("/v1/status")).json()
    mine = next(o for o in status["observers"] if o["name"] == "consolidate")
    assert mine["last_error"] == error


async def test_the_documented_consolidation_plugin_runs(
    short_tmp: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/plugins.md's example, as printed, loads and leaves only the current state."""
    (short_tmp / "example_judge.py").write_text(example("docs/plugins.md", "SameStart"))
    monkeypatch.syspath_prepend(str(short_tmp))
    plugin = {"class": "example_judge:SameStart", "settings": {"words": 3}}
    config = load_config(_config(short_tmp, fake_llm, **plugin), {})
    async with running_daemon(config), socket_client(config.server.socket) as client:
        await _distilled(client)
        response = await client.post("/v1/consolidate", params={"scope": SCOPE})
        assert response.status_code == 200, response.text
        assert set(await _facts(client)) == CURRENT
        assert set(await _facts(client, history=True)) == CURRENT | set(RETIRED)


def _consolidation_calls(llm: FakeLLM) -> int:
    return sum(FACTS_OPEN in str(r["messages"]) for r in llm.requests)


async def test_an_outage_is_waited_out_without_using_up_the_attempts(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    config = load_config(_config(short_tmp, fake_llm, min_new_facts=len(CONVERSATION)), {})
    fake_llm.poison, fake_llm.poison_behaviour = FACTS_OPEN, "status:503"
    async with running_daemon(config) as api, socket_client(config.server.socket) as client:
        await _distilled(client)
        with trio.fail_after(20):
            await fake_llm.wait_until(lambda llm: _consolidation_calls(llm) > 4)  # > max_attempts
            fake_llm.poison = None
            await until(api.hub, lambda: _current(client))


async def test_an_answer_that_never_validates_leaves_the_facts_as_they_are(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    config = load_config(_config(short_tmp, fake_llm), {})
    fake_llm.poison, fake_llm.poison_behaviour = FACTS_OPEN, "garbage"
    async with running_daemon(config), socket_client(config.server.socket) as client:
        await _distilled(client)
        response = await client.post("/v1/consolidate", params={"scope": SCOPE})
        (run,) = response.json()["runs"]
        assert (run["changes"], run["usage"]["calls"]) == ([], 3)  # [distill] max_attempts
        assert len(await _facts(client)) == len(CONVERSATION)
        status = (await client.get("/v1/status")).json()
    mine = next(o for o in status["observers"] if o["name"] == "consolidate")
    assert mine["llm_calls"] == 3
    assert mine["last_error"].startswith("InvalidAnswer: the answer holds no JSON object")


@pytest.mark.slow
async def test_the_eval_scenario_ends_with_only_current_answers(short_tmp: Path) -> None:
    """`make eval`'s current-state scenario with the fake: every answer current after a run."""
    off, at_distillation, after = await currentstate.measure(short_tmp, bundled=False)
    assert after == (len(currentstate.QUESTIONS), 0)
    assert at_distillation[0] >= off[0]


def test_a_supersession_needs_a_shared_subject() -> None:
    """A later fact about something else ("the user's name") retires nothing it is not about."""
    facts = [
        CurrentFact(1, "state", "The user lives in Lisbon.", "2026-03-01T10:00:00.000Z"),
        CurrentFact(2, "preference", "The user prefers tea.", "2026-03-01T10:00:00.000Z"),
        CurrentFact(3, "state", "The user's name is Mallory.", "2026-03-04T10:00:00.000Z"),
        CurrentFact(4, "state", "The user lives in Berlin.", "2026-03-04T10:00:00.000Z"),
    ]
    from forged.consolidate.judgement import ProposedChange

    proposed = [ProposedChange("supersede", n, 3, "obsolete") for n in (1, 2)]
    proposed.append(ProposedChange("supersede", 1, 4, "moved"))
    with capture_logs() as logs:
        kept = checked(proposed, facts, set(), 300)
    assert [(c.action, c.fact_id, c.into_id) for c in kept] == [("supersede", 1, 4)]
    assert [e["why"] for e in logs if e["event"] == "consolidation_changes_refused"] == [
        {"supersedes a fact about another subject": 2}
    ]


def test_an_answer_of_100000_changes_is_read_up_to_its_cap_and_logged_once() -> None:
    """A flood of proposed changes costs one log line with counts, not one line per change."""
    facts = [
        CurrentFact(n, "state", f"The user owns car number {n}.", "2026-03-01") for n in (1, 2)
    ]
    from forged.consolidate.judgement import ProposedChange

    proposed = [ProposedChange("supersede", 7, 8, "x")] * 100_000
    with capture_logs() as logs:
        assert checked(proposed, facts, set(), 300) == []
    assert logs == [
        {
            "event": "consolidation_changes_refused",
            "log_level": "info",
            "refused": 100_000,
            "proposed": 100_000,
            "why": {
                "names a fact that is not in the list": 32,
                "past the 32 changes an answer may hold": 99_968,
            },
        },
    ]
