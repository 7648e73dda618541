"""NUL, the one character PostgreSQL's text cannot hold, at every door: a push, a fact written by
hand, a query, a forget and a model's answer. On both stores alike: refused with a message in a
scope, session or id (a name); kept as U+FFFD in what was said."""

from __future__ import annotations

import json

import httpx

from forged.config import Config
from tests.support.daemons import socket_client, wait_for_watermark
from tests.support.fakellm import FakeLLM, envelope

REFUSED = "must not hold a NUL character (\\u0000)"


def _turn(text: str, scope: str = "n") -> dict[str, object]:
    return {"scope": scope, "messages": [{"role": "user", "name": "A\x00na", "text": text}]}


def _refused(response: httpx.Response) -> str:
    assert response.status_code == 400, response.text
    return str(response.json()["error"]["message"])


async def test_nul_is_refused_in_a_name_and_replaced_in_what_is_said(
    daemon: Config, fake_llm: FakeLLM
) -> None:
    """The push is stored with U+FFFD and distilled from a model whose fact and summary spell
    NUL; a scope, session or id holding NUL is refused wherever a request names it."""
    answer = {
        "summary": "Ana\x00moved to Porto in May.",
        "facts": [{"kind": "event", "text": "Ana\x00moved to Porto in May."}],
    }
    fake_llm.default, fake_llm.raw = "raw", lambda request: envelope(json.dumps(answer))
    async with socket_client(daemon.server.socket) as client:
        pushed = await client.post("/v1/interactions", json=_turn("Ana\x00moved to Porto in May."))
        assert pushed.status_code == 202, pushed.text
        await wait_for_watermark(client, pushed.json()["last_seq"])
        found = {
            kind: [
                r["text"] for r in (await client.get("/v1/search", params=params)).json()["results"]
            ]
            for kind in ("interaction", "fact", "summary")
            if (params := {"q": "moved", "scope": "n", "types": kind})
        }
        assert found == {
            "interaction": ["A\ufffdna: Ana\ufffdmoved to Porto in May."],
            "fact": ["Ana\ufffdmoved to Porto in May."],
            "summary": ["Ana\ufffdmoved to Porto in May."],
        }
        written = await client.post("/v1/facts", json={"text": "Ana\x00 is here.", "scope": "n"})
        assert written.json()["fact"]["text"] == "Ana\ufffd is here."
        named = [
            await client.post("/v1/interactions", json=_turn("x", scope="n\x00")),
            await client.post("/v1/interactions", json={**_turn("x"), "session": "\x00"}),
            await client.post("/v1/interactions", json={**_turn("x"), "id": "i\x00"}),
            await client.post("/v1/facts", json={"text": "x", "scope": "n\x00"}),
            await client.get("/v1/search", params={"q": "moved", "scope": "n\x00"}),
            await client.get("/v1/context", params={"q": "x", "session": "\x00"}),
            await client.delete("/v1/scopes/n%00"),
        ]
        assert [_refused(r) for r in named] == [
            f"`{key}` {REFUSED}"
            for key in ("scope", "session", "id", "scope", "scope", "session", "scope")
        ]
        status = (await client.get("/v1/status")).json()
    assert status["observers"][0]["dead_letters"] == 0
