"""Interactions through the real socket to distilled results: batching, outages, crashes, secrets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import trio

from forged.config import load_config
from forged.scrub.scan import scrub
from tests.support.daemons import (
    DaemonProcess,
    running_daemon,
    socket_client,
    wait_for_watermark,
    write_config,
)
from tests.support.data import rows, store_files
from tests.support.fakellm import FakeLLM
from tests.support.secret_corpus import SECRETS


def interaction(n: int, scope: str = "user:alice", **extra: Any) -> dict[str, Any]:
    return {
        "id": f"chat-{n}",
        "scope": scope,
        "session": "chat",
        "messages": [
            {"role": "user", "text": f"Turn {n}: shall we keep PostgreSQL for service {n}?"},
            {"role": "assistant", "text": f"Yes, PostgreSQL stays for service {n}."},
        ],
        **extra,
    }


def results_per_seq(db: str | Path, last_seq: int) -> dict[int, int]:
    """How many summaries cover each seq, and check each seq's fact appears once."""
    covered = {seq: 0 for seq in range(1, last_seq + 1)}
    for first, last in rows(db, "SELECT first_seq, last_seq FROM summaries"):
        for seq in range(first, last + 1):
            covered[seq] += 1
    facts = rows(db, "SELECT first_seq, last_seq FROM facts")
    seen = [first for first, last in facts if first == last]  # the fake quotes one interaction
    assert sorted(seen) == list(range(1, last_seq + 1)), "each seq has exactly one fact"
    return covered


async def test_burst_is_batched_into_few_llm_calls(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """200 pushes while each LLM call takes 200 ms: all committed, at most 50 calls."""
    fake_llm.latency = 0.2
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(60):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            for n in range(200):
                assert (
                    await client.post("/v1/interactions", json=interaction(n))
                ).status_code == 202
            status = await wait_for_watermark(client, 200)
    assert status["log"]["last_seq"] == 200
    (distill,) = status["observers"]
    assert distill["watermark"] == 200
    assert fake_llm.calls <= 50, fake_llm.calls
    assert distill["llm_calls"] == fake_llm.calls
    assert set(results_per_seq(config.store.path, 200).values()) == {1}


async def test_llm_outage_keeps_the_watermark_until_it_is_back(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """While the LLM refuses connections nothing moves; once back, everything is distilled once."""
    await fake_llm.go_down()
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(60):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            for n in range(5):
                await client.post("/v1/interactions", json=interaction(n))
            while api.hub.progress["distill"].status.state != "waiting_for_llm":
                await api.hub.changed()
            distill = (await client.get("/v1/status")).json()["observers"][0]
            assert distill["watermark"] == 0
            assert "ConnectError" in distill["last_error"]
            assert rows(config.store.path, "SELECT count(*) FROM summaries") == [(0,)]
            await fake_llm.come_back()
            await wait_for_watermark(client, 5)
    assert set(results_per_seq(config.store.path, 5).values()) == {1}


async def test_sigkill_before_commit_loses_nothing(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """Kill -9 while a batch waits on the LLM: after restart every 202 is there once, distilled once."""
    fake_llm.default = "hang"
    daemon = DaemonProcess(write_config(short_tmp, fake_llm.base_url), short_tmp)
    with trio.fail_after(120):
        await daemon.start()
        async with socket_client(daemon.socket) as client:
            for n in range(20):
                assert (
                    await client.post("/v1/interactions", json=interaction(n))
                ).status_code == 202
        await fake_llm.wait_for_calls(1)
        await daemon.kill()
        assert rows(daemon.config.store.path, "SELECT count(*) FROM summaries") == [(0,)]
        fake_llm.default = "ok"
        await daemon.start()
        async with socket_client(daemon.socket) as client:
            status = await wait_for_watermark(client, 20)
        assert await daemon.stop() == 0
    assert status["log"] == {"last_seq": 20, "count": 20}
    assert rows(daemon.config.store.path, "SELECT count(DISTINCT client_id) FROM interactions") == [
        (20,)
    ]
    assert set(results_per_seq(daemon.config.store.path, 20).values()) == {1}


def _secret_parts(secret: str) -> list[str]:
    """The long tokens of a secret that scrubbing removes: none may be stored or sent."""
    kept = set(re.findall(r"[\w+/=-]{8,}", scrub(secret)))
    return [t for t in re.findall(r"[\w+/=-]{8,}", secret) if t not in kept]


async def test_secrets_never_reach_the_database_or_the_llm(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Every kind of secret in a message is gone from the file, the WAL and every LLM request."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    pushed = [
        interaction(
            i, messages=[{"role": "user", "name": "alice", "text": f"here you go: {secret} thanks"}]
        )
        for i, (_, secret) in enumerate(SECRETS)
    ]
    with trio.fail_after(60):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            assert (await client.post("/v1/interactions", json=pushed)).status_code == 202
            await wait_for_watermark(client, len(pushed))
            stored = b"".join(p.read_bytes() for p in store_files(config.store.path))
    sent = repr(fake_llm.requests)
    parts = [p for _, secret in SECRETS for p in _secret_parts(secret)]
    assert len(parts) >= len(SECRETS)
    assert [p for p in parts if p.encode() in stored] == []
    assert [p for p in parts if p in sent] == []
    assert "[REDACTED:" in sent
