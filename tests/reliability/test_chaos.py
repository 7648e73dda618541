"""LLM chaos: outages, 5xx, slow, garbage and truncated answers while interactions arrive."""

from __future__ import annotations

from pathlib import Path

import httpx
import trio

from forged.config import load_config
from tests.support.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.support.data import facts_per_seq, integrity, interaction, rows, summaries_per_seq
from tests.support.fakellm import FakeLLM
from tests.support.reliability import record, scaled

PHASES = ("outage", "status:503", "status:500", "slow", "garbage", "truncated")  # in this order
CYCLES = scaled(3)  # times the fake LLM goes through every phase
CHUNK = 3  # interactions pushed per phase
POISON_EVERY = 3  # every third chunk carries one poisoned interaction
POISON = "POISON-PILL"  # the fake LLM answers garbage to any prompt holding it
SLOW = 0.3  # seconds per answer in the slow phase


async def _state(client: httpx.AsyncClient) -> str:
    return str((await client.get("/v1/status")).json()["observers"][0]["state"])


async def _push_through(
    phase: str, llm: FakeLLM, client: httpx.AsyncClient, body: list[object]
) -> None:
    """Push one chunk while the fake LLM misbehaves as `phase` says, until it has done so."""
    calls = llm.calls
    if phase == "outage":
        await llm.go_down()
    elif phase == "slow":
        llm.latency = SLOW
    elif phase.startswith("status:"):
        llm.script.extend([phase, phase])  # transient: retried for as long as it lasts
    else:
        llm.script.extend([phase, "ok"])  # an invalid answer, then a good one on the retry
    assert (await client.post("/v1/interactions", json=body)).status_code == 202
    if phase == "outage":
        while await _state(client) != "waiting_for_llm":  # noqa: ASYNC110 - seen only via /v1/status
            await trio.sleep(0.01)  # re-ask the daemon shortly
        await llm.come_back()
    elif phase == "slow":
        await llm.wait_until(lambda llm: llm.calls > calls and llm.in_flight == 0)
        llm.latency = 0.0
    else:
        await llm.wait_until(lambda llm: not llm.script)


async def test_llm_chaos_loses_nothing_and_dead_letters_only_poison(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Every misbehaviour, thrice: each interaction distilled once, the poison dead-lettered."""
    fake_llm.poison, fake_llm.poison_behaviour = POISON, "garbage"
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    poisoned: set[str] = set()
    pushed = 0
    with trio.fail_after(60 * scaled(1)):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            for chunk in range(CYCLES * len(PHASES)):
                # one number each: the source of a fact is found by its words and numbers
                ids = [f"chaos-{chunk * CHUNK + n}" for n in range(CHUNK)]
                body = [interaction(i) for i in ids]
                if chunk % POISON_EVERY == 0:
                    poisoned.add(ids[chunk % CHUNK])
                    body[chunk % CHUNK] = interaction(ids[chunk % CHUNK], text=f"{POISON} here")
                await _push_through(PHASES[chunk % len(PHASES)], fake_llm, client, body)
                pushed += len(body)
            status = await wait_for_watermark(client, pushed)
    db = config.store.path
    seq_of = dict(rows(db, "SELECT client_id, seq FROM interactions"))
    poison_seqs = {seq_of[i] for i in poisoned}
    healthy = dict.fromkeys(sorted(set(range(1, pushed + 1)) - poison_seqs), 1)
    dead = sorted(seq for (seq,) in rows(db, "SELECT seq FROM dead_letters"))
    assert status["log"] == {"last_seq": pushed, "count": pushed}
    assert dead == sorted(poison_seqs)
    assert facts_per_seq(db) == healthy
    assert summaries_per_seq(db) == healthy
    assert rows(db, "SELECT count(*) FROM facts WHERE seen_count > 1") == [(0,)]
    assert integrity(db) == "ok"
    record(
        "llm_chaos",
        phases=CYCLES * len(PHASES),
        interactions=pushed,
        poisoned=len(poisoned),
        dead_letters=len(dead),
        llm_calls=fake_llm.calls,
        lost=0,
        duplicates=0,
    )
