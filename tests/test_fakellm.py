"""Tests for the fake LLM server, over real loopback HTTP."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from forged.llm.prompt import EXTRACTIVE_PROMPT
from tests.support.fakellm import FakeLLM, answer_for

TIMEOUT = 10  # seconds any single test may take
ROOT = (
    Path(__file__).resolve().parent.parent
)  # repository root, for `python -m tests.support.fakellm`
PROMPT = (
    "Distill these interactions.\n"
    '<interaction seq="3" session="s1">\n'
    "user (alice): Let's use PostgreSQL for the new service, we need JSONB and also row locks.\n"
    "assistant: Agreed.\n"
    "</interaction>\n"
    '<interaction seq="7">\n\n'
    "user: Call me Al.\n"
    "</interaction>\n"
)
SCHEMA = {"type": "object", "properties": {"summary": {"type": "string"}}}


def _request(
    prompt: str = PROMPT, fmt: str = "json_schema", system: str = "You extract memory."
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "tiny",
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": prompt},
        ],
    }
    if fmt == "json_schema":
        body["response_format"] = {"type": fmt, "json_schema": {"name": "m", "schema": SCHEMA}}
    else:
        body["response_format"] = {"type": fmt}
    return body


async def _post(client: httpx.AsyncClient, **kwargs: Any) -> httpx.Response:
    return await client.post("/chat/completions", json=_request(**kwargs))


def _content(response: httpx.Response) -> str:
    content = response.json()["choices"][0]["message"]["content"]
    assert isinstance(content, str)
    return content


def _finish(response: httpx.Response) -> str:
    finish = response.json()["choices"][0]["finish_reason"]
    assert isinstance(finish, str)
    return finish


@pytest.fixture
async def llm(nursery: trio.Nursery) -> FakeLLM:
    fake = FakeLLM()
    await nursery.start(fake.serve)
    return fake


@pytest.fixture
async def client(llm: FakeLLM) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=llm.base_url, timeout=TIMEOUT) as http:
        yield http


async def test_base_url_points_at_the_bound_loopback_port(llm: FakeLLM) -> None:
    """base_url names 127.0.0.1, the real port and the /v1 prefix."""
    assert llm.port > 0
    assert llm.base_url == f"http://127.0.0.1:{llm.port}/v1"


async def test_models_lists_the_model(llm: FakeLLM, client: httpx.AsyncClient) -> None:
    """GET /v1/models lists the configured model in the OpenAI shape."""
    with trio.fail_after(TIMEOUT):
        response = await client.get("/models")
    assert response.status_code == 200
    assert response.json()["data"][0]["id"] == "fake-model"


async def test_ok_answer_has_chat_completion_shape(client: httpx.AsyncClient) -> None:
    """An ok answer is a chat.completion echoing the model, with stop and usage."""
    with trio.fail_after(TIMEOUT):
        response = await _post(client)
    body = response.json()
    assert response.status_code == 200
    assert body["object"] == "chat.completion"
    assert body["model"] == "tiny"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert _finish(response) == "stop"
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_ok_answer_has_one_fact_per_seq(client: httpx.AsyncClient) -> None:
    """Each tagged interaction gets exactly one fact quoting its first line."""
    with trio.fail_after(TIMEOUT):
        response = await _post(client)
    answer = json.loads(_content(response))
    first = (
        "user (alice): Let's use PostgreSQL for the new service, we need JSONB and also row locks."
    )
    assert answer["summary"] == f"Recorded exchanges: {first[:60]}; user: Call me Al."
    assert answer["facts"] == [
        {"kind": "state", "text": f"Recorded: {first[:60]}."},
        {"kind": "state", "text": "Recorded: user: Call me Al."},
    ]


async def test_asked_to_pick_lines_it_picks_each_first_line(client: httpx.AsyncClient) -> None:
    """Under the extractive prompt the answer picks the first line of every interaction."""
    with trio.fail_after(TIMEOUT):
        response = await _post(client, system=EXTRACTIVE_PROMPT)
    assert json.loads(_content(response)) == {
        "lines": [{"line": "3.1", "kind": "state"}, {"line": "7.1", "kind": "state"}]
    }


async def test_answer_without_seq_tags_has_one_generic_fact(client: httpx.AsyncClient) -> None:
    """A prompt with no interaction tags gets a single generic fact."""
    with trio.fail_after(TIMEOUT):
        response = await _post(client, prompt="Just some text.")
    assert len(json.loads(_content(response))["facts"]) == 1


async def test_answer_is_deterministic() -> None:
    """The same request always gets the same answer."""
    assert answer_for(_request()) == answer_for(_request())


async def test_script_is_consumed_then_default_applies(
    llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    """Scripted behaviours apply one per call, then the default takes over."""
    llm.script.extend(["garbage", "empty"])
    llm.default = "status:500"
    with trio.fail_after(TIMEOUT):
        statuses = [(await _post(client)).status_code for _ in range(3)]
    assert statuses == [200, 200, 500]
    assert not llm.script


@pytest.mark.parametrize(
    ("code", "kind", "message"),
    [
        (503, "unavailable_error", "Loading model"),
        (429, "rate_limit_error", "Too many requests"),
        (500, "server_error", "Internal server error"),
    ],
)
async def test_status_behaviour_answers_llama_style_error(
    llm: FakeLLM, client: httpx.AsyncClient, code: int, kind: str, message: str
) -> None:
    """status:<code> answers that status with a llama-server error body."""
    llm.script.append(f"status:{code}")
    with trio.fail_after(TIMEOUT):
        response = await _post(client)
    assert response.status_code == code
    assert response.json() == {"error": {"code": code, "message": message, "type": kind}}


def _json(content: str) -> Any:
    return json.loads(content)


def _not_json(content: str) -> bool:
    try:
        json.loads(content)
    except json.JSONDecodeError:
        return True
    return False


# What each malformed-answer behaviour promises: its finish_reason and a check of its content.
ANSWERS: dict[str, tuple[str, Callable[[str], bool]]] = {
    "prose": (
        "stop",
        lambda c: (
            c[: c.index("{")].strip() != ""
            and c[c.rindex("}") + 1 :].strip() != ""
            and _json(c[c.index("{") : c.rindex("}") + 1]) == answer_for(_request())
        ),
    ),
    "fence": (
        "stop",
        lambda c: (
            c.startswith("```json\n")
            and c.endswith("\n```")
            and _json(c.removeprefix("```json").removesuffix("```")) == answer_for(_request())
        ),
    ),
    "whitespace": (
        "stop",
        lambda c: len(c) - len(c.rstrip()) > 10_000 and _json(c) == answer_for(_request()),
    ),
    "truncated": ("length", lambda c: c.count('"') % 2 == 1 and _not_json(c)),
    "truncated_stop": ("stop", lambda c: c.count('"') % 2 == 1 and _not_json(c)),
    "length": ("length", lambda c: _json(c) == answer_for(_request())),
    "schema_echo": ("stop", lambda c: _json(c) == SCHEMA),
    "wrong_shape": ("stop", lambda c: list(_json(c)) == ["memories"]),
    "unknown_kind": ("stop", lambda c: {f["kind"] for f in _json(c)["facts"]} == {"opinion"}),
    "garbage": ("stop", _not_json),
    "empty": ("stop", lambda c: c == ""),
}


@pytest.mark.parametrize("behaviour", ANSWERS)
async def test_each_malformed_answer_is_what_it_says(
    llm: FakeLLM, client: httpx.AsyncClient, behaviour: str
) -> None:
    """Each malformed-answer behaviour answers 200 with the content and finish_reason it names."""
    llm.script.append(behaviour)
    with trio.fail_after(TIMEOUT):
        response = await _post(client)
    finish, check = ANSWERS[behaviour]
    assert (response.status_code, _finish(response)) == (200, finish)
    assert check(_content(response))


@pytest.mark.parametrize("code", [400, 500])
async def test_overflow_reports_exceeded_context_like_llama_server(
    llm: FakeLLM, client: httpx.AsyncClient, code: int
) -> None:
    """overflow400 and overflow500 answer exceed_context_size_error with that status."""
    llm.script.append(f"overflow{code}")
    with trio.fail_after(TIMEOUT):
        response = await _post(client)
    error = response.json()["error"]
    assert response.status_code == code
    assert error["type"] == "exceed_context_size_error"
    assert "exceeds the available context size" in error["message"]


async def test_hang_never_answers_until_the_client_closes(
    llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    """hang holds the request open, answering nothing, until the client gives up."""
    llm.script.append("hang")
    answered = []

    async def post_and_record() -> None:
        answered.append(await _post(client))

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(post_and_record)
            await llm.wait_for_calls(1)
            assert (await _post(client)).status_code == 200  # others are still served
            assert llm.in_flight == 1 and not answered
            nursery.cancel_scope.cancel()  # the client closes its connection
        await llm.wait_until(lambda fake: fake.in_flight == 0)
    assert not answered


async def test_poison_marker_gets_its_behaviour_without_using_the_script(
    llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    """A prompt with the poison marker gets poison_behaviour; the script waits for others."""
    llm.poison = "POISON-42"
    llm.script.append("garbage")
    with trio.fail_after(TIMEOUT):
        poisoned = await _post(client, prompt=PROMPT + "POISON-42")
        clean = await _post(client)
    assert poisoned.status_code == 400
    assert poisoned.json()["error"]["type"] == "exceed_context_size_error"
    assert clean.status_code == 200 and _content(clean).startswith("I am sorry")


async def test_rejected_response_format_answers_500_naming_it(
    llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    """A rejected response_format type gets a 500 validation error naming response_format."""
    llm.reject_response_formats = {"json_schema"}
    with trio.fail_after(TIMEOUT):
        rejected = await _post(client, fmt="json_schema")
        accepted = await _post(client, fmt="json_object")
    assert rejected.status_code == 500
    assert rejected.json()["error"]["type"] == "internal_server_error"
    assert "response_format" in rejected.json()["error"]["message"]
    assert accepted.status_code == 200
    assert len(llm.requests) == 2  # the rejected request is recorded too


async def test_rejected_response_format_can_answer_400(
    llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    """reject_status 400 rejects with a 400 that names response_format."""
    llm.reject_response_formats = {"json_schema"}
    llm.reject_status = 400
    with trio.fail_after(TIMEOUT):
        response = await _post(client)
    assert response.status_code == 400
    assert "response_format" in response.json()["error"]["message"]


async def test_prompt_tokens_factor_underreports_usage(
    llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    """prompt_tokens_factor scales the reported prompt_tokens."""
    with trio.fail_after(TIMEOUT):
        full = (await _post(client)).json()["usage"]["prompt_tokens"]
        llm.prompt_tokens_factor = 0.1
        low = (await _post(client)).json()["usage"]["prompt_tokens"]
    assert full > 40 and low == int(full / 10)


async def test_requests_are_recorded_in_order_including_failures(
    llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    """Every decoded completion request is kept in order, failed ones too."""
    llm.script.extend(["status:503", "ok"])
    with trio.fail_after(TIMEOUT):
        await _post(client, prompt="first")
        await _post(client, prompt="second")
    assert [r["messages"][1]["content"] for r in llm.requests] == ["first", "second"]
    assert llm.calls == 2


async def test_wait_for_calls_returns_before_a_slow_answer(
    llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    """wait_for_calls(n) returns once n requests arrived, while latency still holds them."""
    llm.latency = 3600
    answered = []

    async def post_and_record() -> None:
        answered.append(await _post(client))

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(post_and_record)
            await llm.wait_for_calls(3)
            assert llm.calls == 3 and llm.in_flight == 3 and not answered
            nursery.cancel_scope.cancel()


async def test_latency_delays_each_answer(llm: FakeLLM, autojump_clock: trio.abc.Clock) -> None:
    """latency holds each completion that many seconds, concurrent ones in parallel."""
    llm.latency = 30
    start = trio.current_time()
    with trio.fail_after(45):  # virtual seconds: concurrent answers must overlap
        async with (
            httpx.AsyncClient(base_url=llm.base_url, timeout=60) as http,
            trio.open_nursery() as nursery,
        ):
            for _ in range(20):
                nursery.start_soon(_post, http)
    assert trio.current_time() - start >= 30
    assert llm.calls == 20


async def test_go_down_refuses_and_come_back_serves_on_the_same_port(
    llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    """go_down makes connections fail; come_back serves again at the same base_url."""
    base_url = llm.base_url
    with trio.fail_after(TIMEOUT):
        await llm.go_down()
        async with httpx.AsyncClient(base_url=base_url) as fresh:
            with pytest.raises(httpx.ConnectError):
                await _post(fresh)
        await llm.come_back()
        response = await _post(client)
    assert llm.base_url == base_url
    assert response.status_code == 200


async def test_go_down_closes_idle_keep_alive_connections(
    llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    """A kept-alive connection is closed by go_down, so the next request cannot connect."""
    with trio.fail_after(TIMEOUT):
        assert (await _post(client)).status_code == 200
        await llm.go_down()
        with pytest.raises(httpx.ConnectError):
            await _post(client)


@pytest.mark.integration  # starts the fake server
async def test_unknown_behaviour_fails_the_server_loudly() -> None:
    """A behaviour name the fake does not know raises instead of answering."""
    fake = FakeLLM()
    fake.script = collections.deque(["no-such-behaviour"])
    with pytest.raises(ExceptionGroup) as info:
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                await nursery.start(fake.serve)
                async with httpx.AsyncClient(base_url=fake.base_url) as http:
                    await _post(http)
    assert info.group_contains(ValueError, match="unknown behaviour 'no-such-behaviour'")


@pytest.mark.integration
async def test_standalone_mode_prints_a_serving_base_url() -> None:
    """python -m tests.support.fakellm prints its base URL once listening, and serves it."""
    command = [sys.executable, "-m", "tests.support.fakellm", "--port", "0"]
    with trio.fail_after(TIMEOUT):
        process = await trio.lowlevel.open_process(command, cwd=ROOT, stdout=subprocess.PIPE)
        assert process.stdout is not None  # always, with stdout=PIPE
        try:
            line = b""
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1024)
                assert chunk, "exited before printing its URL"
                line += chunk
            url = line.decode().strip()
            async with httpx.AsyncClient() as http:
                response = await http.get(f"{url}/models")
        finally:
            process.kill()
            await process.wait()
            await process.stdout.aclose()
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    assert response.status_code == 200
