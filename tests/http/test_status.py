"""What `/v1/status` and `forged status` show: the batch in flight, and totals after a forget."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import trio

from forged.client.methods import AsyncClient
from forged.config import load_config
from forged.models import Interaction, Message
from tests.support.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.support.fakellm import FakeLLM

TIMEOUT = 60.0
IN_FLIGHT = re.compile(
    r"^  batch in flight: 1 interaction \(\d+ tokens\), started \d\d:\d\d:\d\d UTC, \d+ s ago$"
)


async def test_status_shows_the_batch_in_flight(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """While the model works on a batch, status shows its size, start and age."""
    fake_llm.default = "hang"  # the model never answers: the batch stays in flight
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config), AsyncClient(config.server.socket) as client:
            await client.push(Interaction([Message("user", "A turn of a long chat.")]))
            await fake_llm.wait_for_calls(1)
            batch = (await client.status()).observers[0].batch
            shown = await trio.run_process(
                [sys.executable, "-m", "forged", "status", "--socket", config.server.socket],
                capture_stdout=True,
            )
    assert batch is not None and (batch.interactions, batch.elapsed_s >= 0) == (1, True)
    assert batch.started_at.endswith("Z") and batch.tokens > 0
    lines = shown.stdout.decode().splitlines()
    assert any(IN_FLIGHT.match(line) for line in lines), lines


async def test_no_batch_in_flight_when_idle(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """Once the batch is committed the observer is idle and shows no batch."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config), AsyncClient(config.server.socket) as client:
            await client.push(Interaction([Message("user", "Hello there.")]))
            async with socket_client(config.server.socket) as http:
                await wait_for_watermark(http, 1)
            distill = (await client.status()).observers[0]
    assert (distill.state, distill.batch, distill.batches) == ("idle", None, 1)


async def test_forgetting_a_scope_takes_its_runs_out_of_the_totals(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """After a forget, /v1/status shows what a restart would: the erased runs no longer count."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config) as api, AsyncClient(config.server.socket) as client:
            await client.push(Interaction([Message("user", "Keep this.")], scope="kept"))
            async with socket_client(config.server.socket) as http:
                await wait_for_watermark(http, 1)
                await client.push(Interaction([Message("user", "Forget this.")], scope="gone"))
                await wait_for_watermark(http, 2)
            before = (await client.status()).observers[0]
            await client.forget("gone")
            after = (await client.status()).observers[0]
            stored = await api.store.observer_totals("distill")
    assert (before.batches, before.llm_calls) == (2, 2)
    assert (after.batches, after.llm_calls) == (1, 1)
    assert (after.prompt_tokens, after.llm_ms) == (stored.prompt_tokens, stored.llm_ms)


WAITING = re.compile(
    r"^  waiting for its model since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(\d+ s\);"
    r" start the model server, or distil without one: \[distiller\] offline = true$"
)


async def test_status_says_since_when_it_waits_for_its_model(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """With the model down, status says plainly that distill waits for it and since when; the
    time holds through the retries and is gone once the model answers."""
    await fake_llm.go_down()
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config) as api, AsyncClient(config.server.socket) as client:
            await client.push(Interaction([Message("user", "A turn nobody distils yet.")]))
            seen: list[tuple[str, str | None]] = []  # (state, waiting_since) as they change
            distill = api.hub.progress["distill"].status
            while [state for state, _ in seen].count("waiting_for_llm") < 2:
                await api.hub.changed()
                if not seen or seen[-1] != (distill.state, distill.waiting_since):
                    seen.append((distill.state, distill.waiting_since))
            shown = await trio.run_process(
                [sys.executable, "-m", "forged", "status", "--socket", config.server.socket],
                capture_stdout=True,
            )
            await fake_llm.come_back()
            async with socket_client(config.server.socket) as http:
                await wait_for_watermark(http, 1)
            after = (await client.status()).observers[0]
    waits = {since for state, since in seen if state == "waiting_for_llm"}
    assert len(waits) == 1 and None not in waits, seen  # one outage, one start
    assert "distilling" in [state for state, _ in seen]  # a retry came between
    lines = shown.stdout.decode().splitlines()
    assert any(WAITING.match(line) for line in lines), lines
    assert (after.state, after.waiting_since) == ("idle", None)
