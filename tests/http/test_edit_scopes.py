"""The one scope rule on every edit: a route, a command or a tool that names no scope acts on
`default` alone, one that names a scope on that scope alone, and every scope only when asked
(`all_scopes=true`, `--all-scopes`); another scope's item is missing, and stays as it was."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from forged.config import Config
from tests.cli.test_commands import forged
from tests.support.daemons import socket_client, wait_for_watermark

VICTIM = "victim"
TEXT = "I keep the spare key under the blue flowerpot."


async def _victims(client: httpx.AsyncClient) -> dict[str, Any]:
    """A distilled turn of the victim's scope: its seq, its fact and its summary."""
    turn = {"scope": VICTIM, "messages": [{"role": "user", "text": TEXT}]}
    seq = (await client.post("/v1/interactions", json=turn)).json()["last_seq"]
    await wait_for_watermark(client, seq)
    scoped = {"scope": VICTIM}
    (fact,) = (await client.get("/v1/facts", params=scoped)).json()["facts"]
    (summary,) = (await client.get("/v1/summaries", params=scoped)).json()["summaries"]
    return {"seq": seq, "fact": fact["id"], "summary": summary["id"]}


async def _state(client: httpx.AsyncClient, ids: dict[str, Any]) -> tuple[Any, ...]:
    """What an edit of the victim's items would change: its fact, turns and summaries."""
    audit = (await client.get(f"/v1/facts/{ids['fact']}", params={"scope": VICTIM})).json()
    turns = (await client.get("/v1/interactions", params={"scope": VICTIM})).json()
    summaries = (await client.get("/v1/summaries", params={"scope": VICTIM})).json()
    fact = audit["fact"]
    return (
        (fact["text"], fact["superseded_by"], fact["pinned"]),
        [i["seq"] for i in turns["interactions"]],
        [s["id"] for s in summaries["summaries"]],
    )


def _edits(ids: dict[str, Any]) -> list[tuple[str, str, str, dict[str, Any] | None]]:
    """Every edit route on the victim's items: method, path, what it names, body."""
    fact, summary, seq = ids["fact"], ids["summary"], ids["seq"]
    return [
        ("PUT", f"/v1/facts/{fact}/pin", f"fact with id {fact}", None),
        ("DELETE", f"/v1/facts/{fact}/pin", f"fact with id {fact}", None),
        ("POST", f"/v1/facts/{fact}/correct", f"fact with id {fact}", {"text": "No key anywhere."}),
        ("DELETE", f"/v1/facts/{fact}", f"fact with id {fact}", None),
        ("DELETE", f"/v1/summaries/{summary}", f"summary with id {summary}", None),
        ("DELETE", f"/v1/interactions/{seq}", f"interaction with id {seq}", None),
    ]


async def test_no_edit_route_reaches_another_scope(daemon: Config) -> None:
    """Without a scope (so `default`) or with another one, each edit route answers 404 naming
    the scope it looked in, and the victim's items stay as they were."""
    async with socket_client(daemon.server.socket) as client:
        ids = await _victims(client)
        before = await _state(client, ids)
        for params, looked_in in (({}, "default"), ({"scope": "attacker"}, "attacker")):
            for method, path, names, body in _edits(ids):
                answer = await client.request(method, path, params=params, json=body)
                assert (answer.status_code, answer.json()["error"]) == (
                    404,
                    {"code": "not_found", "message": f"no {names} in scope {looked_in!r}"},
                ), (method, path, params)
        after = await _state(client, ids)
    assert after == before
    assert before[0][1:] == (None, False) and before[1:] == ([ids["seq"]], [ids["summary"]])


@pytest.mark.parametrize("scoped", [{"scope": VICTIM}, {"all_scopes": "true"}], ids=str)
async def test_an_edit_in_the_named_scope_or_all_scopes_goes_through(
    daemon: Config, scoped: dict[str, str]
) -> None:
    """Named by its scope, or with `all_scopes=true`, every edit route acts; both at once is a
    400 naming the rule."""
    async with socket_client(daemon.server.socket) as client:
        ids = await _victims(client)
        method, path, _, _ = _edits(ids)[0]
        both = await client.request(method, path, params={"scope": VICTIM, "all_scopes": "true"})
        assert (both.status_code, both.json()["error"]["message"]) == (
            400,
            "give `scope` or `all_scopes=true`, not both",
        )
        answers = [
            await client.request(method, path, params=scoped, json=body)
            for method, path, _, body in _edits(ids)
        ]
    assert [a.status_code for a in answers] == [200, 200, 201, 200, 200, 200], [
        a.text for a in answers
    ]


async def test_the_edit_trail_follows_the_scope_rule(daemon: Config) -> None:
    """`/v1/edits` lists `default`'s edits without a scope, a named scope's, or every scope's
    with `all_scopes=true`."""
    async with socket_client(daemon.server.socket) as client:
        ids = await _victims(client)
        mine = await client.post("/v1/facts", json={"text": "Tea at four.", "scope": "default"})
        await client.put(f"/v1/facts/{ids['fact']}/pin", params={"scope": VICTIM})
        trails = {
            name: (await client.get("/v1/edits", params=params)).json()["edits"]
            for name, params in (
                ("plain", {}),
                ("victim", {"scope": VICTIM}),
                ("all", {"all_scopes": "true"}),
            )
        }
    assert mine.status_code == 201
    assert [(e["scope"], e["action"]) for e in trails["plain"]] == [("default", "add")]
    assert [(e["scope"], e["action"]) for e in trails["victim"]] == [(VICTIM, "pin")]
    assert [e["scope"] for e in trails["all"]] == [VICTIM, "default"]


async def test_the_edit_commands_follow_the_scope_rule(daemon: Config) -> None:
    """`forged delete|correct|pin|unpin` without `--scope` leave another scope's fact alone
    and say where they looked; with `--scope` or `--all-scopes` they act; `forged edits` too."""
    socket = ("--socket", daemon.server.socket)
    async with socket_client(daemon.server.socket) as client:
        ids = await _victims(client)
        fact = str(ids["fact"])
        before = await _state(client, ids)
        refused = [
            await forged("delete", "fact", fact, "--yes", *socket),
            await forged("correct", fact, "No key anywhere.", *socket),
            await forged("pin", fact, *socket),
            await forged("unpin", fact, "--scope", "attacker", *socket),
        ]
        assert await _state(client, ids) == before
        pinned = await forged("pin", fact, "--scope", VICTIM, *socket)
        unpinned = await forged("unpin", fact, "--all-scopes", *socket)
        trail = await forged("edits", *socket)
        victim_trail = await forged("edits", "--scope", VICTIM, *socket)
        erased = await forged("delete", "fact", fact, "--yes", "--all-scopes", *socket)
    messages = [r.stderr.decode().strip() for r in refused]
    assert [r.returncode for r in refused] == [1] * 4
    assert messages == [
        *[f"forged: 404 not_found: no fact with id {fact} in scope 'default'"] * 3,
        f"forged: 404 not_found: no fact with id {fact} in scope 'attacker'",
    ]
    assert (pinned.returncode, unpinned.returncode, erased.returncode) == (0, 0, 0)
    assert VICTIM not in trail.stdout.decode()
    assert victim_trail.stdout.decode().count(VICTIM) == 2  # the pin and the unpin
    assert erased.stdout.startswith(b"erased (edit ")
