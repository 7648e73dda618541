"""`GET /v1/metrics`: Prometheus text read over the real socket, and the node_exporter file."""

from __future__ import annotations

import json
from pathlib import Path

import trio
from prometheus_client.parser import text_string_to_metric_families

from forged.config import load_config
from tests.support.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.support.data import interaction
from tests.support.fakellm import FakeLLM

TIMEOUT = 60.0
SCOPE = "user:metrics-alice"  # must appear in no metric
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _samples(text: str) -> Samples:
    """Every sample of a scrape, by its name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


async def test_metrics_count_pushes_requests_model_calls_and_recall(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """After pushes, a distilled batch, a search, a context and a forget, the scrape counts
    each of them, agrees with /v1/status, and names no scope."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    body = json.dumps([interaction(f"m{n}", scope=SCOPE) for n in range(3)]).encode()
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            pushed = await client.post("/v1/interactions", content=body)
            assert pushed.status_code == 202
            status = await wait_for_watermark(client, 3, hub=api.hub)
            await client.get("/v1/search", params={"q": "PostgreSQL", "scope": SCOPE})
            await client.get("/v1/context", params={"q": "PostgreSQL", "scope": SCOPE})
            await client.delete(f"/v1/scopes/{SCOPE}")
            answer = await client.get("/v1/metrics")
    assert answer.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert SCOPE not in answer.text and "metrics-alice" not in answer.text
    s = _samples(answer.text)
    (distill,) = status["observers"]
    assert _value(s, "forged_interactions_accepted_total") == 3
    assert _value(s, "forged_ingest_bytes_total") == len(body)
    request = {"route": "/v1/interactions", "method": "POST", "code": "202"}
    assert _value(s, "forged_request_duration_seconds_count", **request) == 1
    forget = {"route": "/v1/scopes/{scope}", "method": "DELETE", "code": "200"}
    assert _value(s, "forged_request_duration_seconds_count", **forget) == 1
    assert _value(s, "forged_observer_batches_total", observer="distill") == distill["batches"]
    calls = _value(s, "forged_model_calls_total", observer="distill", outcome="ok")
    assert calls == distill["llm_calls"] == fake_llm.calls >= 1
    assert _value(s, "forged_model_call_duration_seconds_count", observer="distill") == calls
    prompt = _value(s, "forged_model_tokens_total", observer="distill", type="prompt")
    assert prompt == distill["prompt_tokens"] > 0
    for kind in ("search", "context"):
        assert _value(s, "forged_recall_duration_seconds_count", kind=kind) == 1
    assert _value(s, "forged_observer_watermark", observer="distill") == 3
    assert _value(s, "forged_observer_backlog", observer="distill") == 0
    assert _value(s, "forged_observer_lag_seconds", observer="distill") == 0
    assert _value(s, "forged_observer_state", observer="distill", state="idle") == 1
    assert _value(s, "forged_observer_dead_letters", observer="distill") == 0
    assert _value(s, "forged_store_size_bytes") > 0
    assert _value(s, "forged_reads_total") >= 2  # the search's and the context's at least
    assert _value(s, "forged_reader_waits_total") >= 0


async def test_metrics_show_a_wait_for_the_model(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """With the model down: the backlog, its age, the state and the failed calls by outcome."""
    await fake_llm.go_down()
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            await client.post("/v1/interactions", json=interaction("w1", scope=SCOPE))
            distill = api.hub.progress["distill"].status
            while distill.state != "waiting_for_llm":
                await api.hub.changed()
            s = _samples((await client.get("/v1/metrics")).text)
            uptime = _value(s, "forged_uptime_seconds")
    assert _value(s, "forged_observer_backlog", observer="distill") == 1
    assert 0 <= _value(s, "forged_observer_lag_seconds", observer="distill") <= uptime
    assert _value(s, "forged_observer_state", observer="distill", state="waiting_for_llm") == 1
    assert _value(s, "forged_model_calls_total", observer="distill", outcome="unavailable") >= 1
    assert (
        "forged_model_calls_total",
        frozenset({("observer", "distill"), ("outcome", "ok")}),
    ) not in s


async def test_unknown_paths_and_methods_are_one_label_each(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """A client's made-up paths and methods do not become labels: they count as `other`."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            for n in range(3):
                await client.get(f"/v1/made-up-{n}")
            await client.request("PATCH", "/v1/status")
            s = _samples((await client.get("/v1/metrics")).text)
    assert (
        _value(s, "forged_request_duration_seconds_count", route="other", method="GET", code="404")
        == 3
    )
    status = {"route": "/v1/status", "method": "other", "code": "405"}
    assert _value(s, "forged_request_duration_seconds_count", **status) == 1
    assert not any("made-up" in value for _, labels in s for _, value in labels)


async def test_metrics_are_written_for_node_exporter(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """With `[metrics] textfile`, the file appears whole with the same metrics as the socket."""
    target = short_tmp / "forged.prom"
    path = write_config(short_tmp, fake_llm.base_url, metrics={"textfile": str(target)})
    config = load_config(path, {})
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config):
            while not target.exists():  # noqa: ASYNC110 - a file: nothing to wait on but itself
                await trio.sleep(0.01)
    s = _samples(target.read_text())
    assert _value(s, "forged_log_interactions") == 0
    assert ("forged_observer_watermark", frozenset({("observer", "distill")})) in s
    assert [p.name for p in await trio.Path(short_tmp).iterdir() if p.name.endswith(".tmp")] == []
