"""A user's correction holds against a real daemon: a batch in flight never revives what was
corrected, whatever its turns' dates; recall shows the correction ahead of what it corrects;
and the correction is dated by what it is about."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import trio

from forged.config import Config, load_config
from forged.daemon.runner import Running
from forged.recall.packing import CONTEXT_CLOSE, CONTEXT_OPEN, CORRECTED, TURNS_HEADING
from tests.http.test_edits import SECRET, _by_word, _facts, edited, turn
from tests.support.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.support.fakellm import FakeLLM

__all__ = ["edited"]  # the fixture, shared with the edit tests

ED = {"scope": "ed"}  # the scope of the edit tests' turns
FIXED = "Mia chose the word sapphire for the hint."  # shares no word with the query below


async def _correct(client: httpx.AsyncClient, fact_id: int, **body: Any) -> httpx.Response:
    body = {"text": FIXED, **body}
    return await client.post(f"/v1/facts/{fact_id}/correct", json=body, params=ED)


async def test_a_batch_in_flight_with_turns_dated_ahead_does_not_revive_a_corrected_fact(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Turn 2 repeats turn 1, is dated 20 hours ahead (ingest accepts it) and is with the model
    when the user corrects the fact: the answer does not bring the old text back. A turn pushed
    after the correction that says it again may (by sequence, not by time)."""
    ahead = (datetime.now(UTC) + timedelta(hours=20)).isoformat().replace("+00:00", "Z")
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            await client.post("/v1/interactions", json=turn(1, SECRET))
            await wait_for_watermark(client, 1, hub=api.hub)
            (fact,) = await _facts(client)
            fake_llm.gate = trio.Event()
            await client.post("/v1/interactions", json=turn(2, SECRET, at=ahead))
            await fake_llm.wait_for_calls(2)
            fixed = (await _correct(client, fact["id"])).json()["fact"]
            fake_llm.gate.set()
            await wait_for_watermark(client, 2, hub=api.hub)
            after_batch = await _facts(client)
            await client.post("/v1/interactions", json=turn(3, SECRET))
            await wait_for_watermark(client, 3, hub=api.hub)
            later = await _facts(client)
    assert [f["id"] for f in after_batch] == [fixed["id"]]
    assert sorted(f["id"] for f in later) == [fact["id"], fixed["id"]]  # said again: current


async def test_a_correction_is_dated_like_the_fact_or_by_at(
    edited: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """No `at`: the correction carries the corrected fact's dates and the fact is invalid from
    its own start (it was never true). With `at`: from then. A future or unreadable `at` is a
    400 naming it."""
    _, _, client = edited
    facts = _by_word(await _facts(client))
    old, other = facts[SECRET], facts["Amberfalcon"]
    like = (await _correct(client, old["id"])).json()["fact"]
    retired = (await client.get(f"/v1/facts/{old['id']}", params=ED)).json()["fact"]
    assert (like["first_at"], like["last_at"]) == (old["first_at"], old["last_at"])
    assert retired["invalid_at"] == old["first_at"]
    moved = "The nests moved to the cliffs."
    future = await _correct(client, other["id"], text=moved, at="2999-01-01T00:00:00Z")
    garbled = await _correct(client, other["id"], text=moved, at="June")
    assert (future.status_code, future.json()["error"]["message"]) == (
        400,
        "at: '2999-01-01T00:00:00Z' is in the future",
    )
    assert garbled.status_code == 400
    assert garbled.json()["error"]["message"].startswith("at: 'June' ")
    dated = await _correct(client, other["id"], text=moved, at="2023-06-01T09:30:00+02:00")
    dated = dated.json()["fact"]
    assert (dated["first_at"], dated["last_at"]) == ("2023-06-01T07:30:00.000Z",) * 2
    retired = (await client.get(f"/v1/facts/{other['id']}", params=ED)).json()["fact"]
    assert retired["invalid_at"] == "2023-06-01T07:30:00.000Z"


async def test_search_and_context_put_the_correction_ahead_of_what_it_corrects(
    edited: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """Asked about the corrected turn's words, search answers the user's correction first and
    marks the turn as corrected by it; the context block holds the correction above the turn,
    which is labelled as corrected: the old words never stand alone as if current."""
    _, _, client = edited
    old = _by_word(await _facts(client))[SECRET]
    fixed = (await _correct(client, old["id"])).json()["fact"]
    query = {"q": "Bluequartz password hint", "scope": "ed"}
    results = (await client.get("/v1/search", params=query)).json()["results"]
    block = (await client.get("/v1/context", params=query)).json()
    turns = [r for r in results if r["type"] == "interaction" and SECRET in r["text"]]
    assert turns, results
    first_turn = results.index(turns[0])
    ahead = [r["id"] for r in results[:first_turn] if r["type"] == "fact"]
    assert fixed["id"] in ahead
    assert all(t["corrected_by"] == fixed["id"] for t in turns)
    lines = block["text"].splitlines()
    fix = next(n for n, line in enumerate(lines) if FIXED in line)
    holding = [n for n, line in enumerate(lines) if SECRET in line]  # the summary, the turn
    assert holding and all(fix < n and CORRECTED in lines[n] for n in holding), lines
    assert lines.index(TURNS_HEADING.strip()) < holding[-1]


async def test_a_corrected_turn_never_enters_a_block_without_its_correction(
    edited: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """Every block size, from too small for anything up: whenever the turn is in the block,
    the correction is above it."""
    _, _, client = edited
    old = _by_word(await _facts(client))[SECRET]
    await _correct(client, old["id"])
    seen_turn = False
    for budget in range(60, 400, 10):
        params = {"q": "Bluequartz password hint", "scope": "ed", "budget_tokens": str(budget)}
        text = (await client.get("/v1/context", params=params)).json()["text"]
        if SECRET in text:
            seen_turn = True
            assert FIXED in text and text.index(FIXED) < text.index(SECRET), (budget, text)
            assert CORRECTED in text
    assert seen_turn


async def test_the_command_line_corrects_with_at_and_shows_the_correction_first(
    edited: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """`forged correct --at` dates the correction; `forged context` and `forged search` on the
    old words show it above them, the old turn marked; a bad `--at` is refused with why."""
    from tests.cli.test_commands import forged

    config, _, client = edited
    socket = ("--socket", config.server.socket)
    ed = (*socket, "--scope", "ed")
    old = _by_word(await _facts(client))[SECRET]
    bad = await forged("correct", str(old["id"]), FIXED, "--at", "soon", *ed)
    assert bad.returncode != 0 and b"at: 'soon' " in bad.stderr, bad.stderr
    fixed = await forged(
        "correct", str(old["id"]), FIXED, "--at", "2023-07-01T00:00:00Z", "--json", *ed
    )
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["fact"]["first_at"] == "2023-07-01T00:00:00.000Z"
    block = await forged("context", "Bluequartz password", "--scope", "ed", *socket)
    found = await forged("search", "Bluequartz password", "--scope", "ed", *socket)
    text = block.stdout.decode()
    assert FIXED in text and text.index(FIXED) < text.index(f"{CORRECTED}] Mia: {SECRET}")
    rows = found.stdout.decode().splitlines()
    fix = next(n for n, row in enumerate(rows) if FIXED in row)
    marked = [n for n, row in enumerate(rows) if "[corrected by #" in row]
    assert marked and all(fix < n for n in marked), rows


async def test_mcp_correct_takes_at_and_recall_shows_the_correction_first(daemon: Config) -> None:
    """An agent corrects with `at`; `recall` and `search` then put the correction first and
    mark the old turn; an unreadable `at` is a tool error naming it."""
    from tests.cli.test_mcp import _text, _turn, mcp_session

    async with socket_client(daemon.server.socket) as http:
        await http.post(
            "/v1/interactions", json=[_turn("I live in Porto now.", "2023-05-01T10:00:00Z")]
        )
        await wait_for_watermark(http, 1)
        (old,) = (await http.get("/v1/facts", params={"scope": "user:alice"})).json()["facts"]
    async with mcp_session(daemon, "--scope", "user:alice") as session:
        bad = await session.call_tool(
            "correct", {"fact_id": old["id"], "text": "Alice lives in Lisbon.", "at": "May"}
        )
        fixed = await session.call_tool(
            "correct",
            {"fact_id": old["id"], "text": "Alice lives in Lisbon.", "at": "2023-06-01T00:00:00Z"},
        )
        recalled = _text(await session.call_tool("recall", {"query": "Porto"}))
        found = _text(await session.call_tool("search", {"query": "Porto"}))
    assert bad.is_error and "`at` 'May' " in _text(bad)
    assert not fixed.is_error, _text(fixed)
    assert recalled.index("Alice lives in Lisbon.") < recalled.index("I live in Porto now.")
    assert CORRECTED in recalled
    lines = found.removeprefix(CONTEXT_OPEN).removesuffix(CONTEXT_CLOSE).splitlines()
    assert "2023-06-01] Alice lives in Lisbon." in lines[0], lines
    assert any("corrected by fact" in line and "Porto" in line for line in lines[1:]), lines
