"""Crash loop: SIGKILL the daemon at random moments under load; nothing is lost or doubled."""

from __future__ import annotations

import random
from pathlib import Path

import httpx
import pytest
import trio

from tests.support import daemons
from tests.support.daemons import DaemonProcess, socket_client, wait_for_watermark, write_config
from tests.support.data import facts_per_seq, integrity, interaction, rows, summaries_per_seq
from tests.support.fakellm import FakeLLM
from tests.support.reliability import record, scaled

SEED = 20261129  # the kill moments are random, and the same on every run
KILLS = scaled(20)  # SIGKILLs survived
KILL_AFTER = (0.05, 0.5)  # seconds of uptime before each kill, uniformly drawn
LLM_LATENCY = 0.05  # seconds per LLM call, so that kills also land mid-batch


class _Pusher:
    """Pushes unique interactions forever; retries what was not acknowledged with the same ids."""

    def __init__(self, socket: str, rng: random.Random) -> None:
        self.socket = socket
        self.rng = rng
        self.up = trio.Event()
        self.acknowledged: set[str] = set()
        self.requests = 0
        self.retries = 0
        self._next = 0

    def _fresh(self) -> list[str]:
        size = self.rng.randint(1, 4)
        self._next += size
        return [f"push-{n}" for n in range(self._next - size, self._next)]

    async def run(self) -> None:
        pending: list[str] = []
        while True:
            await self.up.wait()
            ids = pending or self._fresh()
            try:
                async with socket_client(self.socket) as client:
                    while True:
                        self.requests += 1
                        response = await client.post(
                            "/v1/interactions", json=[interaction(i) for i in ids]
                        )
                        if response.status_code != 202:
                            assert response.status_code == 503, response.text
                            break
                        self.acknowledged.update(ids)
                        ids = self._fresh()
            except httpx.TransportError:
                pass  # the daemon died under us: the ids in hand were not acknowledged
            pending = ids
            self.retries += 1


@pytest.mark.slow  # in the default run too; `-m "not slow"` skips it
async def test_sigkill_loop_loses_and_doubles_nothing(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """Twenty SIGKILLs under load: every 202 stored and distilled exactly once, file intact."""
    fake_llm.latency = LLM_LATENCY
    config = write_config(short_tmp, fake_llm.base_url, distill={"max_batch_interactions": 8})
    daemon = DaemonProcess(config, short_tmp)
    rng = random.Random(SEED)
    pusher = _Pusher(daemon.socket, rng)
    mid_batch = 0
    starts = 2 if daemons.STORE_URL else 1  # a start on PostgreSQL opens a pool and a lease too
    async with daemon:  # a timeout must not leave the last daemon running
        with trio.fail_after((60 * scaled(1) + 60) * starts):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pusher.run)
                for n in range(KILLS):
                    await daemon.start()
                    pusher.up.set()
                    await trio.sleep(rng.uniform(*KILL_AFTER))  # the chaos clock: a random moment
                    if n == KILLS - 1 and not mid_batch:  # no random moment fell mid-call
                        await fake_llm.wait_until(lambda llm: llm.in_flight > 0)
                    pusher.up = trio.Event()
                    mid_batch += fake_llm.in_flight > 0
                    await daemon.kill()
                nursery.cancel_scope.cancel()
            fake_llm.latency = 0  # kills are over: the backlog left is drained at full speed
            await daemon.start()
            async with socket_client(daemon.socket) as client:
                last_seq = (await client.get("/v1/status")).json()["log"]["last_seq"]
                status = await wait_for_watermark(client, last_seq)
            assert await daemon.stop() == 0
    db = daemon.config.store.path
    ids = dict(rows(db, "SELECT client_id, seq FROM interactions"))
    stored, seqs = set(ids), sorted(ids.values())
    (seen_twice,) = rows(db, "SELECT count(*) FROM facts WHERE seen_count > 1")[0]
    assert pusher.acknowledged - stored == set(), "an acknowledged interaction was lost"
    assert status["log"] == {"last_seq": seqs[-1], "count": len(stored)}, "ids once"
    if daemons.STORE_URL is None:  # PostgreSQL does not reuse the seq of a rolled-back insert
        assert seqs == list(range(1, len(stored) + 1)), "seqs are dense"
        assert integrity(db) == "ok"
    assert status["observers"][0]["watermark"] == last_seq
    assert facts_per_seq(db) == dict.fromkeys(seqs, 1)
    covered = summaries_per_seq(db)  # a summary's span may hold a seq never committed
    assert {seq: covered.get(seq) for seq in seqs} == dict.fromkeys(seqs, 1)
    assert seen_twice == 0
    assert mid_batch > 0, "no kill landed while the LLM was answering"
    record(
        "crash_loop",
        kills=KILLS,
        kills_mid_llm_call=mid_batch,
        acknowledged=len(pusher.acknowledged),
        stored=len(stored),
        requests=pusher.requests,
        interrupted_pushes=pusher.retries,
        llm_calls=fake_llm.calls,
        batches=status["observers"][0]["batches"],
        lost=0,
        duplicates=0,
    )
