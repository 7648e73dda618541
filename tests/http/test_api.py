"""The local API over the real Unix socket: shapes, every rejection, keep-alive, idempotency."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from forged.config import load_config
from tests.support.daemons import running_daemon, socket_client, write_config
from tests.support.fakellm import FakeLLM

ONE = {"messages": [{"role": "user", "text": "Let's use PostgreSQL, we need JSONB."}]}


@pytest.fixture
async def client(short_tmp: Path, fake_llm: FakeLLM) -> AsyncIterator[httpx.AsyncClient]:
    config = load_config(
        write_config(
            short_tmp, fake_llm.base_url, server={"max_body_bytes": 4096, "max_messages": 4}
        ),
        {},
    )
    with trio.fail_after(30):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            yield client


async def _error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"]["code"] == code
    return str(body["error"]["message"])


async def test_push_one_answers_202_with_counts(client: httpx.AsyncClient) -> None:
    """A single object is accepted and numbered."""
    response = await client.post("/v1/interactions", json=ONE)
    assert response.status_code == 202
    assert response.json() == {"accepted": 1, "duplicates": 0, "last_seq": 1}


async def test_push_array_and_ndjson(client: httpx.AsyncClient) -> None:
    """A JSON array and NDJSON bodies are both accepted whole."""
    response = await client.post("/v1/interactions", json=[ONE, ONE])
    assert response.json() == {"accepted": 2, "duplicates": 0, "last_seq": 2}
    ndjson = "\n".join(json.dumps(ONE) for _ in range(3)) + "\n"
    response = await client.post(
        "/v1/interactions", content=ndjson, headers={"content-type": "application/x-ndjson"}
    )
    assert response.json() == {"accepted": 3, "duplicates": 0, "last_seq": 5}


async def test_curl_form_content_type_is_read_as_json(client: httpx.AsyncClient) -> None:
    """`curl -d @file.json` sends application/x-www-form-urlencoded; it is JSON all the same."""
    response = await client.post(
        "/v1/interactions",
        content=json.dumps(ONE),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 202


async def test_same_id_is_stored_once(client: httpx.AsyncClient) -> None:
    """A client id already stored counts as a duplicate, in another request or the same one."""
    item = {**ONE, "id": "chat-42:turn-7"}
    assert (await client.post("/v1/interactions", json=item)).json()["accepted"] == 1
    again = await client.post("/v1/interactions", json=[item, {**ONE, "id": "other"}, item])
    assert again.json() == {"accepted": 1, "duplicates": 2, "last_seq": 2}


async def test_an_id_is_unique_within_its_scope_only(client: httpx.AsyncClient) -> None:
    """An id another scope pushed first neither stops this scope's push nor tells it the id
    exists there; within one scope the id is still stored once."""
    attacker = {**ONE, "id": "chat-43:turn-1", "scope": "attacker"}
    victim = {**attacker, "scope": "victim"}
    assert (await client.post("/v1/interactions", json=attacker)).json()["accepted"] == 1
    answer = await client.post("/v1/interactions", json=[victim, victim])
    assert answer.json() == {"accepted": 1, "duplicates": 1, "last_seq": 2}
    found = await client.get(
        "/v1/search", params={"q": "PostgreSQL", "scope": "victim", "types": "interaction"}
    )
    assert [r["scope"] for r in found.json()["results"]] == ["victim"]


BAD_BODIES: list[tuple[Any, str]] = [
    ({"scope": 7, **ONE}, "$.scope: Expected `str`, got `int`"),
    ({"scope": "s"}, "Object missing required field `messages`"),
    ({"messages": [{"role": "user", "text": "  "}]}, "$.messages[0]: `text` must not be empty"),
    ({"messages": [{"role": "bot", "text": "hi"}]}, "$.messages[0].role: Invalid enum value 'bot'"),
    ({**ONE, "colour": "red"}, "Object contains unknown field `colour`"),
    ({"messages": []}, "$.messages: Expected `array` of length >= 1"),
    ([ONE, {"messages": "hi"}], "$[1].messages: Expected `array`, got `str`"),
    ({"messages": [ONE["messages"][0]] * 5}, "$.messages: 5 messages, at most 4 allowed"),
    ({**ONE, "timestamp": "yesterday"}, "timestamp: 'yesterday' is not an ISO 8601 date and time"),
    (
        {**ONE, "timestamp": "2026-11-29T17:00:00"},
        "timestamp: '2026-11-29T17:00:00' has no time zone (add Z or an offset)",
    ),
    ([], "the body holds no interactions"),
]


@pytest.mark.parametrize(("body", "message"), BAD_BODIES)
async def test_invalid_body_names_the_field(
    client: httpx.AsyncClient, body: Any, message: str
) -> None:
    """Each invalid body is a 400 whose message says where and what; nothing is stored."""
    response = await client.post("/v1/interactions", json=body)
    assert await _error(response, 400, "invalid_body") == message
    assert (await client.get("/v1/status")).json()["log"]["count"] == 0


async def test_bad_ndjson_line_is_named(client: httpx.AsyncClient) -> None:
    """A bad NDJSON line is reported by its number and nothing of the request is stored."""
    body = json.dumps(ONE) + "\n" + '{"messages": [{"role": "user"}]}\n'
    response = await client.post(
        "/v1/interactions", content=body, headers={"content-type": "application/x-ndjson"}
    )
    message = await _error(response, 400, "invalid_body")
    assert message == "line 2: $.messages[0]: Object missing required field `text`"
    assert (await client.get("/v1/status")).json()["log"]["count"] == 0


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (
            b"{nope",
            "application/json",
            "the body is not valid JSON: object keys must be strings (byte 1)",
        ),
        (
            b'{"messages": [',
            "application/json",
            "the body is not valid JSON: it ends at byte 14 before the JSON value is complete",
        ),
        (
            b'{"messages": [{"role": "user", "text": "hi"}]}\n{"messages": [{"role"',
            "application/x-ndjson",
            "line 2: not valid JSON: it ends at byte 21 before the JSON value is complete",
        ),
    ],
)
async def test_not_json_says_so_and_where(
    client: httpx.AsyncClient, body: bytes, content_type: str, message: str
) -> None:
    """Bytes that are not JSON say that the body is not JSON, and where it breaks."""
    response = await client.post(
        "/v1/interactions", content=body, headers={"content-type": content_type}
    )
    assert await _error(response, 400, "invalid_body") == message


async def test_empty_body_is_a_clear_400(client: httpx.AsyncClient) -> None:
    """An empty body says what to send."""
    response = await client.post("/v1/interactions", content=b"")
    assert await _error(response, 400, "invalid_body") == "the body is empty; send an interaction"


async def test_body_too_large_is_413(client: httpx.AsyncClient) -> None:
    """A body over max_body_bytes is refused before it is read whole."""
    big = {"messages": [{"role": "user", "text": "x" * 5000}]}
    response = await client.post("/v1/interactions", json=big)
    assert await _error(response, 413, "body_too_large") == "the body is larger than 4096 bytes"


async def test_other_content_type_is_415(client: httpx.AsyncClient) -> None:
    """Only JSON and NDJSON are understood."""
    response = await client.post(
        "/v1/interactions", content=b"<xml/>", headers={"content-type": "application/xml"}
    )
    message = await _error(response, 415, "unsupported_media_type")
    assert (
        message
        == "Content-Type 'application/xml' is not supported; send application/json or application/x-ndjson"
    )


async def test_unknown_path_and_wrong_method(client: httpx.AsyncClient) -> None:
    """404 for an unknown path, 405 naming the allowed methods."""
    assert await _error(await client.get("/v1/nope"), 404, "not_found") == "no such path: /v1/nope"
    message = await _error(await client.get("/v1/consolidate"), 405, "method_not_allowed")
    assert message == "/v1/consolidate accepts POST"


async def test_status_and_health_shapes(client: httpx.AsyncClient) -> None:
    """Status reports the log and each observer; health is ok once ready."""
    await client.post("/v1/interactions", json=ONE)
    status = (await client.get("/v1/status")).json()
    assert status["ready"] is True
    assert status["log"] == {"last_seq": 1, "count": 1}
    (distill,) = status["observers"]
    assert distill["name"] == "distill"
    assert set(distill) >= {
        "watermark",
        "backlog",
        "state",
        "batches",
        "llm_calls",
        "prompt_tokens",
        "completion_tokens",
        "dead_letters",
        "last_batch_at",
        "last_error",
    }
    assert (await client.get("/v1/health")).json() == {"status": "ok"}


async def test_keep_alive_serves_many_requests_on_one_connection(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Three requests written on one raw connection get three answers on it."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(30):
        async with running_daemon(config):
            stream = await trio.open_unix_socket(config.server.socket)
            async with stream:
                request = b"GET /v1/health HTTP/1.1\r\nHost: forged\r\n\r\n"
                await stream.send_all(request * 3)
                received = b""
                while received.count(b'{"status":"ok"}') < 3:
                    received += await stream.receive_some(65536)
            assert received.count(b"HTTP/1.1 200") == 3


@pytest.mark.parametrize("path", ["/v1/health", "/v1/summaries", "/v1/facts", "/v1/nope"])
async def test_head_answers_like_get_without_a_body(client: httpx.AsyncClient, path: str) -> None:
    """HEAD gets GET's status and Content-Length, and no body."""
    get, head = await client.get(path), await client.head(path)
    assert head.status_code == get.status_code
    assert head.headers["content-length"] == str(len(get.content))
    assert head.content == b""
    assert (await client.get("/v1/health")).json() == {"status": "ok"}  # the daemon is still up


async def test_head_where_get_is_not_served_is_405(client: httpx.AsyncClient) -> None:
    """HEAD stands for GET: a POST-only path refuses it, naming its methods."""
    response = await client.head("/v1/consolidate")
    assert response.status_code == 405
    assert response.headers["content-length"] == str(
        len(b'{"error":{"code":"method_not_allowed","message":"/v1/consolidate accepts POST"}}')
    )


@pytest.mark.parametrize(
    ("method", "url", "message"),
    [
        (
            "POST",
            "/v1/interactions?x=1",
            "unknown parameter `x`; /v1/interactions takes no parameters",
        ),
        (
            "GET",
            "/v1/status?verbose",
            "unknown parameter `verbose`; /v1/status takes no parameters",
        ),
        ("DELETE", "/v1/scopes/a?b", "unknown parameter `b`; /v1/scopes/a takes no parameters"),
        (
            "GET",
            "/v1/dead-letters?first=1",
            "unknown parameter `first`; /v1/dead-letters accepts scope, all_scopes, from, to",
        ),
        (
            "GET",
            "/v1/facts?after=9223372036854775808",
            "`after` must be the `next` cursor of a previous page; got '9223372036854775808'",
        ),
        (
            "GET",
            "/v1/summaries?after=99999999999999999999",
            "`after` must be the `next` cursor of a previous page; got '99999999999999999999'",
        ),
        (
            "GET",
            "/v1/dead-letters?to=99999999999999999999999",
            "`to` must be an integer from 0 to 9223372036854775807; got '99999999999999999999999'",
        ),
        (
            "GET",
            "/v1/dead-letters?from=%C2%B2",
            "`from` must be an integer from 0 to 9223372036854775807; got '²'",
        ),
        ("GET", "/v1/search?q=a&limit=%D9%A3", "`limit` must be an integer from 1 to 100; got '٣'"),
    ],
)
async def test_every_route_parses_its_parameters_alike(
    client: httpx.AsyncClient, method: str, url: str, message: str
) -> None:
    """Unknown or out-of-range parameters are a 400 `invalid_parameter` on every route."""
    response = await client.request(method, url, json=ONE if method == "POST" else None)
    assert await _error(response, 400, "invalid_parameter") == message
    assert (await client.get("/v1/status")).json()["log"]["count"] == 0


@pytest.mark.parametrize("timestamp", ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"])
async def test_a_timestamp_out_of_range_is_a_400(client: httpx.AsyncClient, timestamp: str) -> None:
    """A timestamp that leaves years 1 to 9999 in UTC is refused, not a 500."""
    response = await client.post("/v1/interactions", json={**ONE, "timestamp": timestamp})
    assert await _error(response, 400, "invalid_body") == (
        f"timestamp: {timestamp!r} is out of range (years 1 to 9999 in UTC)"
    )


@pytest.mark.parametrize("ahead", [timedelta(days=1, minutes=5), timedelta(days=3000000)])
async def test_a_timestamp_more_than_a_day_ahead_is_a_400(
    client: httpx.AsyncClient, ahead: timedelta
) -> None:
    """A turn dated past tomorrow would win every recency test (and a supersession) until
    that day came: refused, naming the field and the time of receipt; nothing stored."""
    far = ahead > timedelta(days=365)
    when = datetime(9999, 12, 31, tzinfo=UTC) if far else datetime.now(UTC) + ahead
    stamp = when.isoformat().replace("+00:00", "Z")
    response = await client.post("/v1/interactions", json={**ONE, "timestamp": stamp})
    message = await _error(response, 400, "invalid_body")
    pattern = rf"^timestamp: {re.escape(repr(stamp))} is more than a day after the time of "
    assert re.match(pattern + r"receipt \(\d{4}-\d\d-\d\dT[\d:.]+Z\)$", message), message
    assert (await client.get("/v1/status")).json()["log"]["count"] == 0


async def test_a_timestamp_less_than_a_day_ahead_is_kept(client: httpx.AsyncClient) -> None:
    """A client's clock a few hours fast is no attack: its time is stored as sent."""
    stamp = (datetime.now(UTC) + timedelta(hours=23)).isoformat(timespec="milliseconds")
    response = await client.post("/v1/interactions", json={**ONE, "timestamp": stamp})
    assert response.status_code == 202, response.text


async def test_forgetting_unknown_scopes_keeps_no_state(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """DELETE of scopes that never existed leaves nothing behind per scope."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            for n in range(20):
                response = await client.delete(f"/v1/scopes/never-{n}")
                assert response.json() == {
                    "deleted": {"interactions": 0, "summaries": 0, "facts": 0}
                }
    # the only per-scope forget state: a Feed's, while a forgotten scope may still be queued
    assert [feed._forgotten for feed in api.hub.feeds.values()] == [{}]


async def test_a_message_name_over_the_limit_is_a_clear_400(client: httpx.AsyncClient) -> None:
    """`name` has a limit (server.max_name_chars), since it goes to the model with every line."""
    body = {"messages": [{"role": "user", "name": "n" * 257, "text": "hi"}]}
    response = await client.post("/v1/interactions", json=body)
    message = await _error(response, 400, "invalid_body")
    assert message == "$.messages[0].name: 257 characters, at most 256 allowed"
    assert (await client.get("/v1/status")).json()["log"]["count"] == 0
