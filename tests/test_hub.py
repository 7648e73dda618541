"""Observers: batched draining, feeders that block instead of dropping, restarts from the watermark."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from forged import hub
from forged.config import Config, load_config
from forged.hub import Batcher, Feed, Progress
from forged.models import ObserverStatus, StoredInteraction
from forged.store.sqlite import Store
from tests.support.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.support.fakellm import FakeLLM
from tests.support.observers import Recorder

ONE = {"messages": [{"role": "user", "text": "hello"}]}
SEQ = re.compile(r'<interaction seq="(\d+)"')  # the interactions of a batch's transcript


async def test_batcher_takes_what_is_queued_up_to_the_count() -> None:
    """One blocking receive, then whatever is already there, capped by max_items."""
    send, receive = trio.open_memory_channel[int](10)
    for i in range(7):
        send.send_nowait(i)
    batcher = Batcher(receive, max_items=3)
    assert [await batcher.next() for _ in range(3)] == [[0, 1, 2], [3, 4, 5], [6]]


async def test_batcher_keeps_the_overflowing_item_for_the_next_batch() -> None:
    """An item that would pass the weight limit starts the next batch; nothing is lost."""
    send, receive = trio.open_memory_channel[int](10)
    for weight in (4, 4, 4, 20, 1):
        send.send_nowait(weight)
    batcher = Batcher(receive, max_items=10, max_weight=10, weight=lambda w: w)
    assert await batcher.next() == [4, 4]
    assert await batcher.next() == [4]
    assert await batcher.next() == [20]  # heavier than the limit alone: a batch of its own
    assert await batcher.next() == [1]


async def test_batcher_drops_a_carried_item_it_no_longer_keeps() -> None:
    """An item carried over is checked again: one forgotten meanwhile is not in the next batch."""
    send, receive = trio.open_memory_channel[int](10)
    for weight in (4, 4, 5, 1):
        send.send_nowait(weight)
    forgotten: set[int] = set()
    batcher = Batcher(
        receive, max_items=10, max_weight=10, weight=lambda w: w, keep=lambda w: w not in forgotten
    )
    assert await batcher.next() == [4, 4]
    forgotten.add(5)
    assert await batcher.next() == [1]


def _stored(seq: int, scope: str) -> StoredInteraction:
    return StoredInteraction(seq, scope, None, "2026-11-29T17:00:00.000Z", 3, [])


async def test_feed_skips_what_a_forget_took_back(tmp_path: Path) -> None:
    """Queued seqs of the scope up to its last one are skipped; later and other ones come."""
    store = Store(str(tmp_path / "f.db"))
    send, receive = trio.open_memory_channel[StoredInteraction](10)
    feed = Feed(receive, Progress(store, ObserverStatus("o"), lambda: None))
    for seq, scope in ((1, "fz"), (2, "kept"), (3, "fz")):
        send.send_nowait(_stored(seq, scope))
    feed.forget("fz", 3)
    send.send_nowait(_stored(4, "fz"))  # pushed after the forget
    assert [(await feed.receive()).seq, feed.receive_nowait().seq] == [2, 4]
    store.close()


async def test_feed_moves_the_watermark_over_what_it_skipped(tmp_path: Path) -> None:
    """With nothing handed out still in work, skipped seqs count as done: no backlog is left."""
    store = Store(str(tmp_path / "f.db"))
    send, receive = trio.open_memory_channel[StoredInteraction](10)
    committed = trio.Event()
    progress = Progress(store, ObserverStatus("o"), committed.set)
    feed = Feed(receive, progress)
    for seq in (1, 2):
        send.send_nowait(_stored(seq, "fz"))
    feed.forget("fz", 2)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(feed.receive)
            await committed.wait()
            nursery.cancel_scope.cancel()
    assert (progress.status.watermark, await store.watermark("o")) == (2, 2)
    store.close()


async def test_feed_moves_over_the_forgotten_end_of_the_log_it_passed_while_busy(
    tmp_path: Path,
) -> None:
    """The feeder found the log's end forgotten while a forgotten seq was still queued: taking
    that seq later must not pull the watermark back below the end (it was left at 2 of 3)."""
    store = Store(str(tmp_path / "f.db"))
    send, receive = trio.open_memory_channel[StoredInteraction](10)
    committed = trio.Event()
    progress = Progress(store, ObserverStatus("o"), committed.set)
    feed = Feed(receive, progress)
    send.send_nowait(_stored(2, "fz"))  # queued; 3 was only in the log
    feed.forget("fz", 3)
    await feed.passed(3)  # the queue is not empty: nothing committed yet
    assert not committed.is_set()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(feed.receive)  # skips 2, commits, then waits for what comes next
            await committed.wait()
            nursery.cancel_scope.cancel()
    assert (progress.status.watermark, await store.watermark("o")) == (3, 3)
    store.close()


async def test_batcher_ends_with_the_channel() -> None:
    """A closed, empty channel ends the batches."""
    send, receive = trio.open_memory_channel[int](1)
    await send.aclose()
    with pytest.raises(trio.EndOfChannel):
        await Batcher(receive, max_items=2).next()


def _recording(short_tmp: Path, fake_llm: FakeLLM, **distill: Any) -> Config:
    """A daemon's config with the recording observer in place of the distiller."""
    recorder = {"class": "tests.support.observers:Recorder"}
    path = write_config(
        short_tmp,
        fake_llm.base_url,
        distill={"enabled": False, **distill},
        observers={"recorder": recorder},
    )
    return load_config(path, {})


async def test_full_channel_blocks_the_feeder_and_drops_nothing(
    short_tmp: Path, fake_llm: FakeLLM, recorder: type[Recorder]
) -> None:
    """A stalled observer with a 2-slot channel later sees all 60 interactions in order."""
    config = _recording(short_tmp, fake_llm, channel_capacity=2)
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            for _ in range(60):
                await client.post("/v1/interactions", json=ONE)
            assert api.hub.backlog() == 60
            recorder.gate.set()
            while api.hub.backlog():
                await api.hub.changed()
    assert recorder.seen == list(range(1, 61))


async def test_a_stalled_observers_queue_holds_a_bounded_size_of_text(
    short_tmp: Path, fake_llm: FakeLLM, recorder: type[Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue stops taking turns once it holds FEED_CHARS of text, however many slots are
    free (a model down, 256 turns of 12 MB took 3 GB); the observer later sees every one."""
    monkeypatch.setattr(hub, "FEED_CHARS", 10_000)
    config = _recording(short_tmp, fake_llm)
    long = {"messages": [{"role": "user", "text": "x" * 3_000}]}
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            for _ in range(10):
                assert (await client.post("/v1/interactions", json=long)).status_code == 202
            feed = api.hub.feeds["recorder"]
            while feed.sent < 4:  # 9,000 characters queued: room for one more
                await api.hub.changed()
            await trio.testing.wait_all_tasks_blocked()
            assert feed.sent == 4
            recorder.gate.set()
            while api.hub.backlog():
                await api.hub.changed()
    assert recorder.seen == list(range(1, 11))


async def test_interactions_pushed_together_are_distilled_in_full_batches(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Twelve interactions in one request, at most five a batch: batches of 5, 5 and 2, every
    time (the feeder queues what it read without handing the distiller a turn per row)."""
    config = load_config(
        write_config(short_tmp, fake_llm.base_url, distill={"max_batch_interactions": 5}), {}
    )
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            assert (await client.post("/v1/interactions", json=[ONE] * 12)).status_code == 202
            await wait_for_watermark(client, 12, hub=api.hub)
    batches = [SEQ.findall(r["messages"][-1]["content"]) for r in fake_llm.requests]
    assert [(int(b[0]), int(b[-1])) for b in batches] == [(1, 5), (6, 10), (11, 12)]


async def test_failed_observer_restarts_from_its_watermark(
    short_tmp: Path, fake_llm: FakeLLM, recorder: type[Recorder]
) -> None:
    """A plugin that raises is restarted; it resumes after its last commit, skipping nothing."""
    recorder.gate.set()
    recorder.fail_once_at = 4
    config = _recording(short_tmp, fake_llm)
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            await client.post("/v1/interactions", json=[ONE] * 8)
            while api.hub.backlog():
                await api.hub.changed()
            status = (await client.get("/v1/status")).json()["observers"][0]
    assert recorder.seen == [1, 2, 3, 4, 5, 6, 7, 8]
    assert recorder.lives == 2
    assert status["last_error"] == "RuntimeError: plugin failed at seq 4"
