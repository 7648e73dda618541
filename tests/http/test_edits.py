"""Per-item edits against a real daemon: delete one interaction, summary or fact, correct, add
and pin a fact, list scopes and a scope's turns by time; with a batch or a consolidation run in
flight during the edit."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from bench.currentstate import SCOPE as STATE_SCOPE
from forged.config import Config, load_config
from forged.daemon.runner import Running
from forged.models import Deleted, Fact, NewFact
from forged.recall import listing
from forged.recall.listing import Page
from forged.store import common
from forged.store.portable import portable
from forged.store.records import BatchOutcome, ScopeResult
from forged.timestamps import now
from tests.conftest import StoreOpener
from tests.consolidate.test_consolidate import _config as consolidate_config
from tests.consolidate.test_consolidate import _distilled as distilled_states
from tests.store.test_forget import database_bytes, matching_turns
from tests.support import daemons
from tests.support.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.support.data import new
from tests.support.fakellm import FakeLLM

WORDS = ("Amberfalcon", "Bluequartz", "Copperlynx")  # what turns 1, 2 and 3 talk about
SECRET = WORDS[1]
ED = {"scope": "ed"}  # the scope the edits below are made in: the scope rule needs it named
SAID = {  # a line of its own for each word: no fact of one can rest on another's turn
    "Amberfalcon": "{} nests sat above the harbour at dawn.",
    "Bluequartz": "{} was the hint for my bank password.",
    "Copperlynx": "{} paint arrived downtown yesterday evening.",
}


STATE = {"scope": STATE_SCOPE}


def turn(n: int, word: str, scope: str = "ed", at: str | None = None) -> dict[str, Any]:
    return {
        "id": f"{scope}-{n}-{word}",
        "scope": scope,
        "session": "chat",
        "timestamp": at or f"2023-05-{10 + n:02d}T10:00:00Z",
        "messages": [{"role": "user", "name": "Mia", "text": SAID.get(word, "{}.").format(word)}],
    }


async def _facts(client: httpx.AsyncClient, scope: str = "ed", **params: str) -> list[Any]:
    answer = await client.get("/v1/facts", params={"scope": scope, **params})
    return list(answer.json()["facts"])


async def _summaries(client: httpx.AsyncClient, scope: str = "ed") -> list[Any]:
    return list((await client.get("/v1/summaries", params={"scope": scope})).json()["summaries"])


def _by_word(facts: list[Any]) -> dict[str, Any]:
    return {w: f for f in facts for w in WORDS if w in f["text"]}


@pytest.fixture
async def edited(
    short_tmp: Path, fake_llm: FakeLLM
) -> AsyncIterator[tuple[Config, Running, httpx.AsyncClient]]:
    """A daemon holding three distilled turns of scope "ed", one fact each, in one batch."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(60):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            pushed = [turn(n, w) for n, w in enumerate(WORDS, start=1)]
            assert (await client.post("/v1/interactions", json=pushed)).status_code == 202
            await wait_for_watermark(client, 3, hub=api.hub)
            yield config, api, client


async def test_deleting_a_turn_takes_the_memory_resting_on_it_alone(
    edited: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """Turn 2 goes with its fact and every summary told from it; the other facts stay."""
    _, _, client = edited
    summaries = await _summaries(client)
    assert summaries and all(s["first_seq"] <= 2 <= s["last_seq"] for s in summaries)
    response = await client.delete("/v1/interactions/2", params=ED)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["deleted"] == {"interactions": 1, "summaries": len(summaries), "facts": 1}
    assert set(_by_word(await _facts(client))) == {WORDS[0], WORDS[2]}
    assert await _summaries(client) == []
    found = await client.get("/v1/search", params={"q": SECRET, "scope": "ed"})
    assert found.json() == {"results": []}
    log = (await client.get("/v1/status")).json()["log"]
    assert log == {"last_seq": 3, "count": 2}


async def test_a_fact_resting_on_two_turns_loses_the_deleted_one_as_a_source(
    open_store: StoreOpener,
) -> None:
    """A fact from turns 1 and 3 rests on the turns from 1 to 3 and keeps those left once 1
    goes, dated by them; one from turn 1 alone goes; a fact written by hand rests on no turn."""
    store = open_store()
    await store.append([[new("Amberfalcon a"), new("Bluequartz b"), new("Copperlynx c")]])
    both = Fact("state", "Amberfalcon and Copperlynx.", sources=[1, 3])
    alone = Fact("state", "Amberfalcon alone.", sources=[1])
    result = ScopeResult("b1", "s", None, "", [both, alone], 1, 3)
    await store.commit_batch("distill", BatchOutcome([result], [], [], None))  # no lease
    hand = await store.add_fact(NewFact("Written by hand.", scope="s"), None)
    _, erased = await store.delete("interaction", 1)
    page = await store.read(lambda c: listing.list_facts(portable(c), Page(scope="s")))
    store.close()
    assert erased.deleted == Deleted(1, 0, 1)
    assert [(f.text, f.first_seq, f.last_seq) for f in page.facts] == [
        ("Amberfalcon and Copperlynx.", 2, 3),
        ("Written by hand.", 0, 0),
    ]
    assert page.facts[1].id == hand.fact.id


async def test_a_deleted_turn_leaves_the_index_and_the_file(
    edited: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """Its words leave the full-text index; on SQLite no byte of them stays in the files."""
    config, _, client = edited
    before = database_bytes(config.store.path)
    assert matching_turns(config.store.path, SECRET) == 1
    await client.delete("/v1/interactions/2", params=ED)
    assert matching_turns(config.store.path, SECRET) == 0
    assert matching_turns(config.store.path, WORDS[0]) == 1
    if daemons.STORE_URL:
        return  # PostgreSQL keeps dead tuples until autovacuum, as for forget
    assert SECRET.encode() in before
    after = database_bytes(config.store.path)
    for form in (SECRET, SECRET.lower()):
        assert form.encode() not in after, form


async def test_deleting_a_fact_and_a_summary(
    edited: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """Each goes alone; the trail names the edit without its text; a second delete is a 404."""
    _, _, client = edited
    fact = _by_word(await _facts(client))[SECRET]
    (summary, *_) = await _summaries(client)
    gone = await client.delete(f"/v1/facts/{fact['id']}", params=ED)
    assert gone.status_code == 200, gone.text
    assert gone.json()["deleted"] == {"interactions": 0, "summaries": 0, "facts": 1}
    assert (await client.get(f"/v1/facts/{fact['id']}")).status_code == 404
    assert (await client.delete(f"/v1/summaries/{summary['id']}", params=ED)).json()["deleted"] == {
        "interactions": 0,
        "summaries": 1,
        "facts": 0,
    }
    assert set(_by_word(await _facts(client))) == {WORDS[0], WORDS[2]}
    turns = await client.get("/v1/search", params={"q": SECRET, "scope": "ed"})
    assert [r["type"] for r in turns.json()["results"]] == ["interaction"]  # the turn stays
    trail = (await client.get("/v1/edits", params={"scope": "ed"})).json()["edits"]
    assert [(e["action"], e["item"], e["item_id"]) for e in trail] == [
        ("delete", "summary", summary["id"]),
        ("delete", "fact", fact["id"]),
    ]
    assert SECRET not in str(trail)
    again = await client.delete(f"/v1/facts/{fact['id']}", params=ED)
    assert (again.status_code, again.json()) == (
        404,
        {"error": {"code": "not_found", "message": f"no fact with id {fact['id']} in scope 'ed'"}},
    )


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v1/facts/abc", "no fact with id 'abc'"),
        ("/v1/facts/0", "no fact with id '0'"),
        ("/v1/summaries/99", "no summary with id 99 in scope 'default'"),
        ("/v1/interactions/99", "no interaction with id 99 in scope 'default'"),
        ("/v1/interactions/1x", "no interaction with id '1x'"),
    ],
)
async def test_deleting_what_is_not_there(daemon: Config, path: str, message: str) -> None:
    """A 404 naming what was asked for."""
    async with socket_client(daemon.server.socket) as client:
        response = await client.delete(path)
    assert (response.status_code, response.json()["error"]) == (
        404,
        {"code": "not_found", "message": message},
    )


async def test_correcting_a_fact_supersedes_it_with_the_users_text(
    edited: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """The correction is current, by the user, dated like the fact; the old one is history with
    reason `user`, and each names the other in its audit trail."""
    _, _, client = edited
    old = _by_word(await _facts(client))[SECRET]
    started = now()
    response = await client.post(
        f"/v1/facts/{old['id']}/correct",
        json={"text": "Mia never spoke of Bluequartz.", "kind": "correction"},
        params=ED,
    )
    assert response.status_code == 201, response.text
    new = response.json()
    fact = new["fact"]
    assert (fact["text"], fact["kind"], fact["source"]) == (
        "Mia never spoke of Bluequartz.",
        "correction",
        "user",
    )
    assert fact["first_at"] == old["first_at"] and fact["superseded_by"] is None
    assert fact["created_at"] >= started
    (change,) = new["replaced"]
    assert (change["action"], change["reason"], change["fact"]["id"]) == (
        "supersede",
        "user",
        old["id"],
    )
    audit = (await client.get(f"/v1/facts/{old['id']}", params={"scope": "ed"})).json()
    retired = audit["fact"]
    assert (retired["superseded_by"], retired["superseded_reason"]) == (fact["id"], "user")
    assert retired["invalid_at"] == old["first_at"]
    assert audit["replaced_by"]["fact"]["id"] == fact["id"]
    current = {f["id"] for f in await _facts(client)}
    assert fact["id"] in current and old["id"] not in current
    twice = await client.post(
        f"/v1/facts/{old['id']}/correct", json={"text": "Something else."}, params=ED
    )
    assert (twice.status_code, twice.json()["error"]["message"]) == (
        409,
        f"fact {old['id']} was replaced by fact {fact['id']}; correct that one",
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "the body is empty; send a JSON object"),
        (b'{"text": ""}', "Expected `str` of length >= 1 - at `$.text`"),
        (b'{"txt": "x"}', "Object contains unknown field `txt`"),
        (b'{"text": "x", "kind": "mood"}', "Invalid enum value 'mood' - at `$.kind`"),
        (b'{"text": "   "}', "`text` must not be blank"),
    ],
)
async def test_a_bad_correction_is_refused(
    edited: tuple[Config, Running, httpx.AsyncClient], body: bytes, message: str
) -> None:
    """400 `invalid_body` naming the field; the fact stays as it was."""
    _, _, client = edited
    old = _by_word(await _facts(client))[SECRET]
    response = await client.post(f"/v1/facts/{old['id']}/correct", content=body, params=ED)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_body" and error["message"].startswith(message), error
    assert _by_word(await _facts(client))[SECRET] == old


async def test_a_correction_is_scrubbed(edited: tuple[Config, Running, httpx.AsyncClient]) -> None:
    """A secret in a user's text never reaches the store."""
    _, _, client = edited
    old = _by_word(await _facts(client))[SECRET]
    key = "AKIA" + "Z7QXWPLMNB4RTYUE"
    response = await client.post(
        f"/v1/facts/{old['id']}/correct", json={"text": f"The deploy key is {key}."}, params=ED
    )
    assert response.status_code == 201, response.text
    assert key not in response.json()["fact"]["text"]
    assert "[REDACTED" in response.json()["fact"]["text"]


async def test_adding_a_fact_by_hand(daemon: Config) -> None:
    """Stored as given, by the user, dated by `at`; found by search; a duplicate is a 409."""
    async with socket_client(daemon.server.socket) as client:
        body = {
            "text": "Mia adopted a cat named Orbit.",
            "kind": "event",
            "scope": "ed",
            "at": "2023-05-20",
        }
        bad = await client.post("/v1/facts", json=body)
        assert bad.json()["error"]["message"].startswith("at: '2023-05-20' has no time zone")
        body["at"] = "2023-05-20T09:00:00+02:00"
        response = await client.post("/v1/facts", json=body)
        assert response.status_code == 201, response.text
        fact = response.json()["fact"]
        assert (fact["source"], fact["kind"], fact["first_at"], fact["last_at"]) == (
            "user",
            "event",
            "2023-05-20T07:00:00.000Z",
            "2023-05-20T07:00:00.000Z",
        )
        found = await client.get("/v1/search", params={"q": "cat Orbit", "scope": "ed"})
        assert [r["id"] for r in found.json()["results"]] == [fact["id"]]
        again = await client.post("/v1/facts", json=body)
        assert (again.status_code, again.json()["error"]) == (
            409,
            {
                "code": "duplicate_fact",
                "message": f"fact {fact['id']} of scope 'ed' already says"
                " this as a event; correct or pin that one",
            },
        )
        future = await client.post("/v1/facts", json={**body, "at": "2999-01-01T00:00:00Z"})
        assert future.json()["error"]["message"] == "at: '2999-01-01T00:00:00Z' is in the future"


async def test_scopes_with_counts_and_last_activity(
    edited: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """Each scope with its turns, current facts and summaries, newest activity first."""
    _, api, client = edited
    await client.post("/v1/interactions", json=turn(9, "Driftwood", scope="other"))
    await wait_for_watermark(client, 4, hub=api.hub)
    scopes = (await client.get("/v1/scopes")).json()["scopes"]
    assert [s["scope"] for s in scopes] == ["other", "ed"]
    ed = scopes[1]
    assert (ed["interactions"], ed["facts"], ed["first_at"], ed["last_at"]) == (
        3,
        3,
        "2023-05-11T10:00:00.000Z",
        "2023-05-13T10:00:00.000Z",
    )
    assert ed["summaries"] >= 1 and ed["last_received_at"] <= scopes[0]["last_received_at"]


async def test_a_page_of_turns_holds_a_bounded_size(
    daemon: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page stops before the turn that takes it past MAX_READ_BYTES, and `next` goes on
    from there (a page of 1,000 turns of 16 MB would have taken 16 GB to answer)."""
    monkeypatch.setattr(common, "MAX_READ_BYTES", 10_000)
    async with socket_client(daemon.server.socket) as client:
        pushed = [turn(n, "long") for n in (1, 2, 3)]
        for said in pushed:
            said["messages"][0]["text"] = "x" * 4_000
        assert (await client.post("/v1/interactions", json=pushed)).status_code == 202
        pages, after = [], {}
        while after is not None:
            params = {"scope": "ed", "limit": 10, **after}
            page = (await client.get("/v1/interactions", params=params)).json()
            pages.append([i["seq"] for i in page["interactions"]])
            after = None if page["next"] is None else {"after": page["next"]}
    assert pages == [[1, 2], [3]]


async def test_a_scopes_turns_are_listed_by_time_page_by_page(daemon: Config) -> None:
    """Pushed out of order, listed by timestamp; `next` pages on; a bad cursor is a 400."""
    async with socket_client(daemon.server.socket) as client:
        pushed = [turn(3, "C"), turn(1, "A"), turn(2, "B"), turn(1, "Z", scope="elsewhere")]
        await client.post("/v1/interactions", json=pushed)
        first = (await client.get("/v1/interactions", params={"scope": "ed", "limit": 2})).json()
        rest = (
            await client.get("/v1/interactions", params={"scope": "ed", "after": first["next"]})
        ).json()
        bad = await client.get("/v1/interactions", params={"scope": "ed", "after": "7"})
        day = await client.get(
            "/v1/interactions", params={"scope": "ed", "since": "2023-05-12", "until": "2023-05-12"}
        )
    said = [i["messages"][0]["text"][0] for i in first["interactions"] + rest["interactions"]]
    assert said == ["A", "B", "C"] and rest["next"] is None
    assert [i["seq"] for i in first["interactions"]] == [2, 3]
    assert first["next"] == "3@2023-05-12T10:00:00.000Z"
    assert bad.json()["error"] == {
        "code": "invalid_parameter",
        "message": "`after` must be the `next` cursor of a previous page; got '7'",
    }
    assert [i["seq"] for i in day.json()["interactions"]] == [3]


async def test_a_turn_deleted_while_its_batch_is_with_the_model(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """The late answer stores the facts of the other turns, no fact of the deleted one, and no
    summary (it was told from every turn)."""
    fake_llm.gate = trio.Event()
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            await client.post(
                "/v1/interactions", json=[turn(n, w) for n, w in enumerate(WORDS, start=1)]
            )
            await fake_llm.wait_for_calls(1)
            assert SECRET in str(fake_llm.requests[-1])  # the whole batch is in flight
            assert (await client.delete("/v1/interactions/2", params=ED)).status_code == 200
            fake_llm.gate.set()
            await wait_for_watermark(client, 3, hub=api.hub)
            facts = await _facts(client)
            summaries = await _summaries(client)
    assert set(_by_word(facts)) == {WORDS[0], WORDS[2]}
    assert summaries == []


async def test_a_queued_turn_deleted_is_never_distilled(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """Turn 1 in flight, turn 2 queued and deleted: the model never reads turn 2."""
    fake_llm.gate = trio.Event()
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            await client.post("/v1/interactions", json=turn(1, WORDS[0]))
            await fake_llm.wait_for_calls(1)
            await client.post("/v1/interactions", json=[turn(2, SECRET), turn(3, WORDS[2])])
            while api.hub.feeds["distill"].sent < 3:
                await api.hub.changed()
            await client.delete("/v1/interactions/2", params=ED)
            fake_llm.gate.set()
            await wait_for_watermark(client, 3, hub=api.hub)
            facts = await _facts(client)
    assert SECRET not in str(fake_llm.requests)
    assert set(_by_word(facts)) == {WORDS[0], WORDS[2]}


async def test_a_deleted_dead_letter_is_not_redistilled(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """Deleting a turn the model could not distil closes its dead letter for good."""
    fake_llm.poison = SECRET
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            await client.post("/v1/interactions", json=[turn(1, WORDS[0]), turn(2, SECRET)])
            await wait_for_watermark(client, 2, hub=api.hub)
            assert (
                len(
                    (await client.get("/v1/dead-letters", params={"all_scopes": "true"})).json()[
                        "dead_letters"
                    ]
                )
                == 1
            )
            await client.delete("/v1/interactions/2", params=ED)
            fake_llm.poison = None
            calls = fake_llm.calls
            report = (await client.post("/v1/dead-letters/redistill")).json()
            left = (await client.get("/v1/dead-letters", params={"all_scopes": "true"})).json()[
                "dead_letters"
            ]
            status = (await client.get("/v1/status")).json()["observers"][0]
    assert (report["results"], left, fake_llm.calls, status["dead_letters"]) == ([], [], calls, 0)


async def test_a_fact_deleted_while_a_batch_says_it_again_stays_deleted(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Turn 2 repeats turn 1 and is with the model when the user deletes the fact: the answer
    does not bring it back. A turn pushed after the delete that says it again may."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            await client.post("/v1/interactions", json=turn(1, SECRET))
            await wait_for_watermark(client, 1, hub=api.hub)
            (fact,) = await _facts(client)
            fake_llm.gate = trio.Event()
            await client.post("/v1/interactions", json=turn(2, SECRET))
            await fake_llm.wait_for_calls(2)
            await client.delete(f"/v1/facts/{fact['id']}", params=ED)
            fake_llm.gate.set()
            await wait_for_watermark(client, 2, hub=api.hub)
            after_batch = await _facts(client)
            await client.post("/v1/interactions", json=turn(3, SECRET))
            await wait_for_watermark(client, 3, hub=api.hub)
            later = await _facts(client)
    assert after_batch == []
    assert [(f["first_seq"], f["last_seq"]) for f in later] == [(3, 3)]


async def test_a_pinned_fact_is_never_retired_by_consolidation(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Pinned before a run, or while the run is with the model: the fact stays current; the
    run's other changes apply; a fact deleted meanwhile does not come back."""
    config = load_config(consolidate_config(short_tmp, fake_llm), {})
    async with running_daemon(config), socket_client(config.server.socket) as client:
        await distilled_states(client)
        facts = {f["text"]: f for f in await _facts(client, STATE_SCOPE)}
        lisbon, jon = facts["The user lives in Lisbon."], facts["The user's name is Jon."]
        tea = facts["The user prefers tea."]
        pinned = await client.put(f"/v1/facts/{lisbon['id']}/pin", params=STATE)
        assert pinned.status_code == 200 and pinned.json()["fact"]["pinned"] is True
        fake_llm.gate = trio.Event()
        answers: list[httpx.Response] = []
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                answers.append(await client.post("/v1/consolidate", params={"scope": STATE_SCOPE}))

            calls = fake_llm.calls
            nursery.start_soon(run)
            await fake_llm.wait_for_calls(calls + 1)
            assert (await client.put(f"/v1/facts/{tea['id']}/pin", params=STATE)).status_code == 200
            assert (await client.delete(f"/v1/facts/{jon['id']}", params=STATE)).status_code == 200
            fake_llm.gate.set()
        assert answers[0].status_code == 200, answers[0].text
        current = {f["text"] for f in await _facts(client, STATE_SCOPE)}
        unpinned = await client.delete(f"/v1/facts/{tea['id']}/pin", params=STATE)
    assert {"The user lives in Lisbon.", "The user prefers tea."} <= current
    assert "The user lives in Berlin." in current and "The user's name is Jon." not in current
    assert "The user's name is John." in current
    assert unpinned.json()["fact"]["pinned"] is False


async def test_the_command_line_edits(
    edited: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """scopes, summaries, interactions, correct, pin and delete --yes, as a user types them."""
    from tests.cli.test_commands import forged

    config, _, client = edited
    socket = ("--socket", config.server.socket)
    ed = (*socket, "--scope", "ed")
    scopes = await forged("scopes", *socket)
    assert scopes.returncode == 0 and b"ed" in scopes.stdout and b"TURNS" in scopes.stdout
    summaries = await forged("summaries", "--scope", "ed", *socket)
    assert summaries.returncode == 0 and b"Recorded" in summaries.stdout
    turns = await forged("interactions", "--scope", "ed", *socket)
    assert turns.stdout.decode().splitlines()[:2] == [
        "#1  2023-05-11 10:00  chat",
        f"    Mia: {SAID[WORDS[0]].format(WORDS[0])}",
    ]
    old = _by_word(await _facts(client))[SECRET]
    fixed = await forged("correct", str(old["id"]), "Mia spoke of sapphire.", *ed)
    assert fixed.returncode == 0 and b"[by user]" in fixed.stdout, fixed.stderr
    new = next(f for f in await _facts(client) if f["source"] == "user")
    assert (await forged("pin", str(new["id"]), *ed)).stdout.count(b"[pinned]") == 1
    refused = await forged("delete", "interaction", "1", *ed)
    assert refused.returncode == 1 and b"pass --yes" in refused.stderr
    deleted = await forged("delete", "interaction", "1", "--yes", *ed)
    assert deleted.stdout.startswith(b"erased (edit ") and b"1 interactions" in deleted.stdout
    trail = await forged("edits", "--json", *ed)
    trail_edits = json.loads(trail.stdout)["edits"]
    assert [e["action"] for e in trail_edits if e["action"] != "delete"] == ["pin", "correct"]
    assert {e["item"] for e in trail_edits if e["action"] == "delete"} == {
        "interaction",
        "fact",
        "summary",
    }


@pytest.mark.parametrize("edit", ["add", "correct", "pin"])
async def test_an_edit_answers_what_it_wrote_when_another_client_deletes_it_at_once(
    edited: tuple[Config, Running, httpx.AsyncClient],
    monkeypatch: pytest.MonkeyPatch,
    edit: str,
) -> None:
    """Another client's delete that commits right after the edit: the edit still answers the
    fact as its transaction wrote it (read after the commit, the fact was gone and the edit
    answered 500), and the fact is gone after."""
    _, api, client = edited
    old = _by_word(await _facts(client))[SECRET]
    method = {"add": "add_fact", "correct": "correct_fact", "pin": "pin_fact"}[edit]
    written = getattr(api.store, method)

    async def then_deleted(*args: Any) -> Any:
        answer = await written(*args)
        newest = max(f["id"] for f in await _facts(client))  # what the edit wrote or pinned
        await api.hub.delete("fact", old["id"] if edit == "pin" else newest)
        return answer

    monkeypatch.setattr(api.store, method, then_deleted)
    text = "Mia keeps a ledger of Bluequartz colours."
    response = {
        "add": lambda: client.post("/v1/facts", json={"text": text, "scope": "ed"}),
        "correct": lambda: client.post(
            f"/v1/facts/{old['id']}/correct", json={"text": text}, params=ED
        ),
        "pin": lambda: client.put(f"/v1/facts/{old['id']}/pin", params=ED),
    }[edit]
    answer = await response()
    assert answer.status_code == (200 if edit == "pin" else 201), answer.text
    fact = answer.json()["fact"]
    assert fact["text"] == (old["text"] if edit == "pin" else text)
    assert fact["pinned"] is (edit == "pin")
    gone = await client.get(f"/v1/facts/{fact['id']}", params=ED)
    assert gone.status_code == 404
