"""Backpressure: pushes past `max_backlog` are refused whole; a big backlog waits on disk."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import trio

from forged.config import load_config
from tests.support.daemons import DaemonProcess, running_daemon, socket_client, write_config
from tests.support.data import integrity, interaction, rows, store_files
from tests.support.fakellm import FakeLLM
from tests.support.reliability import memory_kib, record, scaled

SMALL_LIMIT = 10  # max_backlog of the refusal tests
BACKLOG = scaled(200_000)  # interactions left waiting on disk in the RSS test
REQUEST_ITEMS = 5_000  # interactions per NDJSON request in the RSS test
RSS_BOUND_KIB = 200 * 1024  # a backlog held in RAM would pass this; one on disk stays far below
RSS_GROWTH_KIB = 32 * 1024  # at most this much more after the second half of the backlog
FILLER = "We compared the options at length and kept the plan. " * 4  # ~200 characters


def _body(start: int, count: int) -> bytes:
    lines = (
        json.dumps(interaction(f"bp-{n}", text=f"Turn {n}. {FILLER}"))
        for n in range(start, start + count)
    )
    return ("\n".join(lines) + "\n").encode()


async def _push(client: httpx.AsyncClient, ids: range) -> httpx.Response:
    return await client.post("/v1/interactions", json=[interaction(f"bp-{n}") for n in ids])


async def test_push_that_would_cross_the_limit_is_refused_whole(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """An array that would cross the limit gets 503 with Retry-After; none of it is kept."""
    await fake_llm.go_down()  # in-process, a hung call would leave httpx's body stream to the GC
    config = load_config(
        write_config(short_tmp, fake_llm.base_url, server={"max_backlog": SMALL_LIMIT}), {}
    )
    with trio.fail_after(30):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            for n in range(6):
                assert (await _push(client, range(n, n + 1))).status_code == 202
            refused = await _push(client, range(6, 11))
            assert (await _push(client, range(11, 15))).status_code == 202
            full = await _push(client, range(15, 16))
            count = (await client.get("/v1/status")).json()["log"]["count"]
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "5"
    assert refused.json()["error"] == {
        "code": "backlog_full",
        "message": "6 interactions wait for distillation and this request adds 5, "
        "the limit is 10; retry later",
    }
    assert full.status_code == 503
    assert count == SMALL_LIMIT
    ids = {i for (i,) in rows(config.store.path, "SELECT client_id FROM interactions")}
    assert ids == {f"bp-{n}" for n in [*range(6), *range(11, 15)]}


async def test_request_larger_than_the_limit_is_413(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """A request holding more interactions than max_backlog could never fit: 413."""
    config = load_config(
        write_config(short_tmp, fake_llm.base_url, server={"max_backlog": SMALL_LIMIT}), {}
    )
    with trio.fail_after(30):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            response = await _push(client, range(SMALL_LIMIT + 1))
            count = (await client.get("/v1/status")).json()["log"]["count"]
    assert response.status_code == 413
    assert response.json()["error"] == {
        "code": "body_too_large",
        "message": "11 interactions in one request, more than max_backlog (10); split the request",
    }
    assert count == 0


async def test_concurrent_pushes_cannot_cross_the_limit_together(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Thirty concurrent single pushes against a limit of ten: exactly ten are accepted."""
    await fake_llm.go_down()  # in-process, a hung call would leave httpx's body stream to the GC
    config = load_config(
        write_config(short_tmp, fake_llm.base_url, server={"max_backlog": SMALL_LIMIT}), {}
    )
    statuses: list[int] = []

    async def one(n: int) -> None:
        async with socket_client(config.server.socket) as client:
            statuses.append((await _push(client, range(n, n + 1))).status_code)

    with trio.fail_after(30):
        async with running_daemon(config), trio.open_nursery() as nursery:
            for n in range(30):
                nursery.start_soon(one, n)
    assert sorted(statuses) == [202] * SMALL_LIMIT + [503] * 20
    assert rows(config.store.path, "SELECT count(*) FROM interactions") == [(SMALL_LIMIT,)]


@pytest.mark.slow  # in the default run too; `-m "not slow"` skips it
@pytest.mark.sqlite_only  # measures the SQLite file's size
async def test_backlog_of_200k_grows_on_disk_not_in_ram(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """With the LLM stalled, 200,000 waiting interactions leave the daemon's RSS bounded."""
    fake_llm.default = "hang"
    daemon = DaemonProcess(write_config(short_tmp, fake_llm.base_url), short_tmp)
    with trio.fail_after(120 * scaled(1)):
        await daemon.start()
        assert daemon.process is not None
        pid = daemon.process.pid
        start = memory_kib(pid)
        ndjson = {"content-type": "application/x-ndjson"}
        async with socket_client(daemon.socket) as client:
            for first in range(0, BACKLOG, REQUEST_ITEMS):
                if first == BACKLOG // 2:
                    half = memory_kib(pid)
                response = await client.post(
                    "/v1/interactions", content=_body(first, REQUEST_ITEMS), headers=ndjson
                )
                assert response.status_code == 202, response.text
            status = (await client.get("/v1/status")).json()
        end = memory_kib(pid)
        await daemon.kill()
    db = Path(daemon.config.store.path)
    size_mib = sum(p.stat().st_size for p in store_files(db)) / 2**20
    assert status["log"]["count"] == BACKLOG
    assert status["observers"][0]["backlog"] == BACKLOG
    assert integrity(db) == "ok"
    record(
        "backpressure",
        backlog=BACKLOG,
        database_mib=round(size_mib),
        rss_at_start_mib=round(start["VmRSS"] / 1024, 1),
        rss_at_half_mib=round(half["VmRSS"] / 1024, 1),
        rss_at_end_mib=round(end["VmRSS"] / 1024, 1),
        peak_rss_mib=round(end["VmHWM"] / 1024, 1),
    )
    assert end["VmHWM"] < RSS_BOUND_KIB
    assert end["VmRSS"] - half["VmRSS"] < RSS_GROWTH_KIB
