"""The OpenAI-compatible distiller against the fake LLM server: answers, errors, modes, accounting."""

from __future__ import annotations

import json
import os
import ssl
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from structlog.testing import capture_logs

from forged.config import Config, DistillerConfig
from forged.daemon.bundled import STRUCTURED_OUTPUT, STYLE
from forged.daemon.loader import make_distiller
from forged.daemon.runner import _with_llm
from forged.errors import ContextOverflow, InvalidAnswer, LLMUnavailable
from forged.llm import distiller as llm
from forged.llm.distiller import OpenAIDistiller
from forged.llm.prompt import (
    GUIDED_MAX_REPLACES,
    PICKS_SCHEMA,
    REPLACES_RULE,
    render_known,
    render_transcript,
    with_replaces,
)
from forged.models import Fact, Message, StoredInteraction
from forged.store.sqlite import Store
from tests.support.data import recalled
from tests.support.fakellm import FakeLLM

TIMEOUT = 10  # seconds any single test may take
TRANSCRIPT = render_transcript(
    [
        StoredInteraction(
            7,
            "user:alice",
            None,
            "2026-11-29T17:00:00Z",
            20,
            [
                Message("user", "Let's use PostgreSQL, we need JSONB.", "alice"),
                Message("assistant", "Agreed: PostgreSQL for the new service."),
            ],
        )
    ]
)
EXPECTED_FACT = Fact("state", "Recorded: alice: Let's use PostgreSQL, we need JSONB.")


@pytest.fixture
async def client(fake_llm: FakeLLM) -> AsyncIterator[OpenAIDistiller]:
    distiller = OpenAIDistiller(DistillerConfig(base_url=fake_llm.base_url))
    yield distiller
    await distiller.aclose()


def _format_type(body: dict[str, Any]) -> str | None:
    fmt = body.get("response_format")
    return fmt["type"] if isinstance(fmt, dict) else None


@pytest.mark.parametrize("behaviour", ["ok", "prose", "fence", "whitespace"])
async def test_the_json_object_is_found_in_any_wrapping(
    client: OpenAIDistiller, fake_llm: FakeLLM, behaviour: str
) -> None:
    """Bare JSON, JSON in prose, in markdown fences or before endless whitespace all parse."""
    fake_llm.default = behaviour
    with trio.fail_after(TIMEOUT):
        memory = await client.distill(TRANSCRIPT)
    assert memory.summary == "Recorded exchanges: alice: Let's use PostgreSQL, we need JSONB."
    assert memory.facts == [EXPECTED_FACT]


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        ("truncated", r"^the answer was cut off at max_tokens$"),
        ("length", r"^the answer was cut off at max_tokens$"),
        ("truncated_stop", r"^the answer is not valid memory: Input data was truncated$"),
        (
            "schema_echo",
            r"^the answer is not valid memory: Object missing required field `summary`$",
        ),
        (
            "wrong_shape",
            r"^the answer is not valid memory: Object missing required field `summary`$",
        ),
        ("garbage", r"^the answer holds no JSON object$"),
        ("empty", r"^the answer holds no JSON object$"),
    ],
)
async def test_a_malformed_answer_is_an_invalid_answer(
    client: OpenAIDistiller, fake_llm: FakeLLM, behaviour: str, message: str
) -> None:
    """Each malformed-answer kind raises InvalidAnswer naming the problem, with the raw answer."""
    fake_llm.default = behaviour
    with trio.fail_after(TIMEOUT), pytest.raises(InvalidAnswer, match=message) as caught:
        await client.distill(TRANSCRIPT)
    assert caught.value.raw is not None
    assert caught.value.usage is not None and caught.value.usage.calls == 1


async def test_unknown_fact_kinds_are_dropped_and_the_summary_kept(
    client: OpenAIDistiller, fake_llm: FakeLLM
) -> None:
    """Facts of a kind forged does not know are dropped, not the whole answer."""
    fake_llm.default = "unknown_kind"
    with trio.fail_after(TIMEOUT):
        memory = await client.distill(TRANSCRIPT)
    assert (memory.summary, memory.facts) == ("Odd kinds.", [])


@pytest.mark.parametrize("status", [429, 500, 502, 503])
async def test_transient_statuses_are_llm_unavailable(
    client: OpenAIDistiller, fake_llm: FakeLLM, status: int
) -> None:
    """429 and 5xx (503 while the model loads) are transient: LLMUnavailable."""
    fake_llm.default = f"status:{status}"
    with trio.fail_after(TIMEOUT), pytest.raises(LLMUnavailable, match=rf"^HTTP {status}: "):
        await client.distill(TRANSCRIPT)


async def test_connection_refused_is_llm_unavailable(
    client: OpenAIDistiller, fake_llm: FakeLLM
) -> None:
    """A server that is not listening is transient too."""
    await fake_llm.go_down()
    with trio.fail_after(TIMEOUT), pytest.raises(LLMUnavailable, match=r"^ConnectError: "):
        await client.distill(TRANSCRIPT)


@pytest.mark.parametrize("behaviour", ["overflow400", "overflow500"])
async def test_context_overflow_is_recognised_with_either_status(
    client: OpenAIDistiller, fake_llm: FakeLLM, behaviour: str
) -> None:
    """llama-server's exceed_context_size_error as 400 or 500 is ContextOverflow, not transient."""
    fake_llm.default = behaviour
    with trio.fail_after(TIMEOUT), pytest.raises(ContextOverflow, match=r"^HTTP (400|500): "):
        await client.distill(TRANSCRIPT)


@pytest.mark.parametrize("status", [400, 500])
async def test_auto_falls_back_from_a_rejected_mode_and_remembers(
    client: OpenAIDistiller, fake_llm: FakeLLM, status: int
) -> None:
    """json_schema refused (500 like llama-cpp-python, or 400): json_object, kept for later calls."""
    fake_llm.reject_response_formats = {"json_schema"}
    fake_llm.reject_status = status
    with trio.fail_after(TIMEOUT):
        first = await client.distill(TRANSCRIPT)
        second = await client.distill(TRANSCRIPT)
    assert first.facts == second.facts == [EXPECTED_FACT]
    assert [_format_type(r) for r in fake_llm.requests] == [
        "json_schema",
        "json_object",
        "json_object",
    ]


async def test_auto_ends_with_the_schema_in_the_prompt(
    client: OpenAIDistiller, fake_llm: FakeLLM
) -> None:
    """A server refusing both formats gets a request without response_format, schema in the prompt."""
    fake_llm.reject_response_formats = {"json_schema", "json_object"}
    with trio.fail_after(TIMEOUT):
        await client.distill(TRANSCRIPT)
    last = fake_llm.requests[-1]
    assert "response_format" not in last
    assert "The answer must follow this JSON schema" in last["messages"][0]["content"]


async def test_a_fixed_mode_that_is_refused_is_an_invalid_answer(fake_llm: FakeLLM) -> None:
    """With structured_output fixed, a refusal is not retried in another mode."""
    fake_llm.reject_response_formats = {"json_schema"}
    config = DistillerConfig(base_url=fake_llm.base_url, structured_output="json_schema")
    distiller = OpenAIDistiller(config)
    try:
        with trio.fail_after(TIMEOUT), pytest.raises(InvalidAnswer, match=r"^HTTP 500: "):
            await distiller.distill(TRANSCRIPT)
    finally:
        await distiller.aclose()
    assert fake_llm.calls == 1


async def test_json_object_mode_sends_a_bounded_schema(fake_llm: FakeLLM) -> None:
    """llama-server style requests carry the schema with bounded lengths, and the extra fields."""
    config = DistillerConfig(
        base_url=fake_llm.base_url,
        structured_output="json_object",
        request_extra={"repeat_penalty": 1.2},
    )
    distiller = OpenAIDistiller(config)
    try:
        with trio.fail_after(TIMEOUT):
            await distiller.distill(TRANSCRIPT)
    finally:
        await distiller.aclose()
    schema = fake_llm.requests[0]["response_format"]["schema"]
    assert schema["properties"]["facts"]["maxItems"] == 8
    assert schema["properties"]["summary"]["maxLength"] == 600
    assert schema["properties"]["facts"]["items"]["properties"]["text"]["maxLength"] == 200
    assert fake_llm.requests[0]["max_tokens"] == config.max_tokens
    assert fake_llm.requests[0]["repeat_penalty"] == 1.2


async def test_usage_is_reported(client: OpenAIDistiller, fake_llm: FakeLLM) -> None:
    """Prompt and completion tokens come from the server; the call is timed."""
    fake_llm.latency = 0.05
    with trio.fail_after(TIMEOUT):
        memory = await client.distill(TRANSCRIPT)
    assert memory.usage.calls == 1
    assert memory.usage.prompt_tokens > 100
    assert memory.usage.completion_tokens > 10
    assert memory.usage.ms >= 50


async def test_a_silently_truncated_prompt_is_warned_about(
    client: OpenAIDistiller, fake_llm: FakeLLM
) -> None:
    """A long prompt whose token count comes back far below the estimate is warned about."""
    fake_llm.prompt_tokens_factor = 0.1
    with trio.fail_after(TIMEOUT), capture_logs() as logs:
        await client.distill(TRANSCRIPT * 40)
    (warning,) = [e for e in logs if e["event"] == "llm_prompt_truncated"]
    assert warning["log_level"] == "warning"
    assert warning["prompt_tokens"] < warning["estimated_tokens"] / 2


async def test_a_short_prompt_is_not_warned_about(
    client: OpenAIDistiller, fake_llm: FakeLLM
) -> None:
    """Below the smallest context a low count means a prompt cache, not truncation."""
    fake_llm.prompt_tokens_factor = 0.1
    with trio.fail_after(TIMEOUT), capture_logs() as logs:
        await client.distill(TRANSCRIPT)
    assert [e for e in logs if e["event"] == "llm_prompt_truncated"] == []


async def test_a_full_prompt_is_not_warned_about(
    client: OpenAIDistiller, fake_llm: FakeLLM
) -> None:
    """A prompt-token count near the estimate logs no truncation warning."""
    with trio.fail_after(TIMEOUT), capture_logs() as logs:
        await client.distill(TRANSCRIPT)
    assert [e for e in logs if e["event"] == "llm_prompt_truncated"] == []


@pytest.mark.parametrize(
    ("base_url", "proxy", "loads"),
    [
        ("http://127.0.0.1:11434/v1", "", False),  # plain HTTP: no certificate to check
        ("https://llm.example/v1", "", True),
        ("http://127.0.0.1:11434/v1", "https://proxy.example:3128", True),  # TLS to the proxy
    ],
)
async def test_the_certificate_store_is_loaded_only_when_tls_may_be_used(
    monkeypatch: pytest.MonkeyPatch, base_url: str, proxy: str, loads: bool
) -> None:
    """Loading it costs 0.1-0.2 s of a daemon's start; an https:// server still gets it."""
    for name in [n for n in os.environ if n.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)
    if proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy)
    loaded: list[ssl.SSLContext] = []
    tls = llm._tls

    def loading() -> ssl.SSLContext:
        loaded.append(tls())
        return loaded[-1]

    monkeypatch.setattr(llm, "_tls", loading)
    distiller = OpenAIDistiller(DistillerConfig(base_url=base_url))
    await distiller.aclose()
    assert len(loaded) == int(loads)


def test_a_bad_distiller_class_is_a_config_error() -> None:
    """`[distiller] class` must name an importable object; the message names the key."""
    from forged.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"^distiller.class: cannot import 'no_such_module': No module named"
    ):
        make_distiller(DistillerConfig(class_="no_such_module:Thing"))


async def test_a_later_attempt_is_asked_warmer(client: OpenAIDistiller, fake_llm: FakeLLM) -> None:
    """At temperature 0 a retry would repeat the broken answer; each attempt runs warmer, to 1.0."""
    fake_llm.script.extend(["garbage", "garbage", "ok", "ok", "ok"])
    with trio.fail_after(TIMEOUT):
        for attempt in (1, 2):
            with pytest.raises(InvalidAnswer):
                await client.distill(TRANSCRIPT, attempt=attempt)
        await client.distill(TRANSCRIPT, attempt=3)
        await client.distill(TRANSCRIPT)  # a first attempt: cool again
        await client.distill(TRANSCRIPT, attempt=9)
    assert [r["temperature"] for r in fake_llm.requests] == [0.0, 0.3, 0.6, 0.0, 1.0]


async def test_the_accepted_mode_is_remembered_across_restarts(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """A distiller that learned json_object keeps it in the store; the next one starts there."""
    fake_llm.reject_response_formats = {"json_schema"}
    store = Store(str(tmp_path / "forged.db"))
    config = DistillerConfig(base_url=fake_llm.base_url)
    try:
        for _life in range(2):  # a restart: a new distiller on the same database
            distiller = OpenAIDistiller(config, memory=store)
            with trio.fail_after(TIMEOUT), capture_logs() as logs:
                await distiller.distill(TRANSCRIPT)
            await distiller.aclose()
        assert await store.known_mode(fake_llm.base_url) == "json_object"
    finally:
        store.close()
    assert [_format_type(r) for r in fake_llm.requests] == [
        "json_schema",
        "json_object",
        "json_object",  # the second life asked in the remembered mode at once
    ]
    assert [e for e in logs if e["event"] == "llm_mode_unsupported"] == []


def test_the_bundled_server_needs_no_probe() -> None:
    """The bundled server's mode is known: `auto` becomes json_object, a fixed mode stays."""
    auto = _with_llm(Config(), "http://127.0.0.1:1/v1", {}, STYLE, STRUCTURED_OUTPUT)
    assert auto.distiller.structured_output == "json_object"
    fixed = Config(distiller=DistillerConfig(structured_output="none"))
    assert (
        _with_llm(
            fixed, "http://127.0.0.1:1/v1", {}, STYLE, STRUCTURED_OUTPUT
        ).distiller.structured_output
        == "none"
    )


KNOWN = [  # a fact the scope already holds, shown beside the transcript
    recalled(
        12,
        "Recorded: alice: Let's use MySQL.",
        "2026-11-20T10:00:00Z",
        first=3,
        scope="user:alice",
        created_at="c",
        last_seen_at="c",
    ),
]


def _schema_sent(body: dict[str, Any]) -> str:
    """The answer schema a request carried, wherever its mode puts it, as text."""
    fmt = body.get("response_format")
    if fmt is None:
        return str(body["messages"][0]["content"])
    return json.dumps(fmt.get("json_schema", {}).get("schema") or fmt["schema"])


@pytest.mark.parametrize(
    ("mode", "style"),
    [
        ("json_schema", "abstractive"),
        ("json_object", "abstractive"),
        ("none", "abstractive"),
        ("json_object", "extractive"),
        ("none", "extractive"),
    ],
)
async def test_known_facts_let_a_new_fact_say_what_it_replaces(
    fake_llm: FakeLLM, mode: str, style: str
) -> None:
    """Every mode asks for `replaces` limited to the listed ids, and the answer carries it."""
    config = DistillerConfig(base_url=fake_llm.base_url, structured_output=mode, style=style)  # type: ignore[arg-type]
    distiller = OpenAIDistiller(config)
    try:
        with trio.fail_after(TIMEOUT):
            memory = await distiller.distill(render_known(KNOWN) + TRANSCRIPT)
            plain = await distiller.distill(TRANSCRIPT)
    finally:
        await distiller.aclose()
    with_known, without = fake_llm.requests
    assert '"replaces": {"type": "array", "items": {"type": "integer", "enum": [12]}' in (
        _schema_sent(with_known)
    )
    assert REPLACES_RULE in with_known["messages"][0]["content"]
    assert "replaces" not in _schema_sent(without)  # no known facts: the request is as before
    replaces = [f.replaces for f in memory.facts] or [list(p.replaces) for p in memory.picks]
    assert replaces == [[12]]
    assert [f.replaces for f in plain.facts] in ([], [[]])


def test_a_grammar_bounds_what_a_fact_replaces() -> None:
    """For llama-server's grammar: as many ids as listed, at most GUIDED_MAX_REPLACES."""
    schema = with_replaces(PICKS_SCHEMA, list(range(1, 10)), bounded=True)
    replaces = schema["properties"]["lines"]["items"]["properties"]["replaces"]
    assert replaces["maxItems"] == GUIDED_MAX_REPLACES
    assert schema["properties"]["lines"]["items"]["required"] == ["line", "kind", "replaces"]
    assert "replaces" not in PICKS_SCHEMA["properties"]["lines"]["items"]["properties"]


DEEP = b"[" * 100_000 + b"]" * 100_000  # deeper than any decoder recurses
VALID = '{"summary": "Alice uses PostgreSQL.", "facts": []}'


@pytest.mark.parametrize(
    "body",
    [
        b'{"choices": [{"message": {"content": "x", "deep": %s}}]}' % DEEP,
        b'{"choices": [{"message": {"content": "x"}}], "extra": %s}' % DEEP,
        b'{"choices": [{"message": {"content": %s}}]}' % DEEP,
        b'{"choices": [{"message": {"content": "x"}, "finish_reason": %s}]}' % DEEP,
    ],
    ids=["in-message", "unknown-field", "as-content", "as-finish-reason"],
)
async def test_a_deeply_nested_completion_is_an_invalid_answer(
    fake_llm: FakeLLM, body: bytes
) -> None:
    """JSON nested 100,000 levels anywhere in the completion (within the size cap of a large
    max_tokens): InvalidAnswer, not RecursionError."""
    distiller = OpenAIDistiller(DistillerConfig(base_url=fake_llm.base_url, max_tokens=8192))
    fake_llm.default, fake_llm.raw = "raw", lambda request: body
    try:
        with (
            trio.fail_after(TIMEOUT),
            pytest.raises(
                InvalidAnswer, match=r"^the answer is not (a chat completion|valid memory): "
            ),
        ):
            await distiller.distill(TRANSCRIPT)
    finally:
        await distiller.aclose()


@pytest.mark.parametrize(
    ("usage", "stored"),
    [
        (
            b'{"prompt_tokens": 9223372036854775807, "completion_tokens": 9223372036854775807}',
            (2**31 - 1, 2**31 - 1),
        ),
        (b'{"prompt_tokens": 1180591620717411303424, "completion_tokens": -5}', (2**31 - 1, 0)),
        (b'{"prompt_tokens": "many", "completion_tokens": 2.5e9}', (0, 2**31 - 1)),
        (b'{"prompt_tokens": 1e999, "completion_tokens": 3}', (0, 0)),
        (b"[[[[]]]]", (0, 0)),
    ],
)
async def test_reported_usage_is_clamped(
    client: OpenAIDistiller, fake_llm: FakeLLM, usage: bytes, stored: tuple[int, int]
) -> None:
    """Counts past 2**31-1, negative or not numbers are clamped, so no total overflows; a
    usage no decoder reads (1e999) counts nothing, and the answer is kept."""
    choice = b'{"message": {"content": %s}, "finish_reason": "stop"}' % json.dumps(VALID).encode()
    fake_llm.default = "raw"
    fake_llm.raw = lambda request: b'{"choices": [%s], "usage": %s}' % (choice, usage)
    with trio.fail_after(TIMEOUT):
        memory = await client.distill(TRANSCRIPT)
    assert (memory.usage.prompt_tokens, memory.usage.completion_tokens) == stored


async def test_an_answer_past_its_size_cap_is_refused_while_streaming(fake_llm: FakeLLM) -> None:
    """A 200 MB answer to max_tokens 64 is cut at the cap (64 bytes a token and 64 KiB), never
    held whole: the peak allocation of this process (the fake's 1 MB sends included) stays
    a few megabytes."""
    distiller = OpenAIDistiller(DistillerConfig(base_url=fake_llm.base_url, max_tokens=64))
    chunk = b" " * (1 << 20)
    fake_llm.default = "raw"
    fake_llm.raw = lambda request: (b'{"choices": [' if i == 0 else chunk for i in range(200))
    tracemalloc.start()
    try:
        with trio.fail_after(TIMEOUT), pytest.raises(InvalidAnswer) as raised:
            await distiller.distill(TRANSCRIPT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await distiller.aclose()
    limit = llm.answer_limit(64)
    assert str(raised.value) == f"the answer is larger than {limit} bytes (max_tokens 64)"
    assert peak < 8 * len(chunk)
    await fake_llm.wait_until(lambda fake: fake.raw_cut == 1)


async def test_the_timeout_bounds_the_whole_call(fake_llm: FakeLLM) -> None:
    """An answer dripped a byte at a time never waits long on one read, yet the call ends at
    `timeout`, as an invalid answer (retried, then dead-lettered: a server that answers this
    slowly would hold every scope), and the server sees it hang up."""
    distiller = OpenAIDistiller(DistillerConfig(base_url=fake_llm.base_url, timeout=0.5))
    fake_llm.default, fake_llm.drip = "raw", 0.02
    fake_llm.raw = lambda request: (
        b'{"choices": [{"message": {"content": %s}}]}' % (json.dumps(VALID).encode())
    )
    try:
        with trio.fail_after(TIMEOUT), pytest.raises(InvalidAnswer) as raised:
            await distiller.distill(TRANSCRIPT)
    finally:
        await distiller.aclose()
    assert str(raised.value) == "the answer did not end within 0.5 s (timeout)"
    await fake_llm.wait_until(lambda fake: fake.raw_cut == 1)
    assert fake_llm.raw_sent == 0


async def test_a_server_that_never_answers_is_unavailable_at_the_timeout(fake_llm: FakeLLM) -> None:
    """No status line by `timeout`: the server is busy or down, waited for like any outage."""
    distiller = OpenAIDistiller(DistillerConfig(base_url=fake_llm.base_url, timeout=0.5))
    fake_llm.default = "hang"
    try:
        with trio.fail_after(TIMEOUT), pytest.raises(LLMUnavailable):
            await distiller.distill(TRANSCRIPT)
    finally:
        await distiller.aclose()
