"""The index keeper yields to ingest: it holds back during a burst and catches up after it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NamedTuple

import trio
from trio.testing import MockClock, wait_all_tasks_blocked

from forged.hub import Hub
from forged.index.keeper import BATCH_WAIT, EASED, HOLD, IndexKeeper
from forged.ingest.pipeline import Ingest
from forged.models import Interaction, Message
from forged.store.sqlite import Store
from tests.support.data import write_locked

HANG = 10.0  # real seconds with every task blocked before a frozen test clock moves on by itself


async def _push(ingest: Ingest, *ids: str, done: trio.Event | None = None) -> None:
    await ingest.push([Interaction(messages=[Message(role="user", text=i)], id=i) for i in ids])
    if done is not None:
        done.set()


async def _held_push(ingest: Ingest, nursery: trio.Nursery, turn: str) -> trio.Event:
    """Start a push that stays in flight while the store's write lock is held elsewhere."""
    done = trio.Event()
    nursery.start_soon(lambda: _push(ingest, turn, done=done))
    await wait_all_tasks_blocked()
    assert ingest.queued == 1
    return done


class Looks:
    """How long ingest has been idle, as the keeper asks it, with an event at each asking."""

    def __init__(self, ingest: Ingest) -> None:
        self.ingest = ingest
        self.asked = trio.Event()

    def __call__(self) -> float:
        self.asked.set()
        self.asked = trio.Event()
        return self.ingest.idle_for()

    async def after(self, clock: MockClock, seconds: float) -> None:
        """Move the clock on and return once the keeper has asked again."""
        asked = self.asked
        clock.jump(seconds)
        await asked.wait()


class Kept(NamedTuple):
    store: Store
    hub: Hub
    ingest: Ingest
    looks: Looks
    keeper: IndexKeeper
    nursery: trio.Nursery


@asynccontextmanager
async def _kept(tmp_path: Path, clock: MockClock) -> AsyncIterator[Kept]:
    """A store, its ingest, and a keeper told by it how long ingest has been idle (not yet
    started), under a clock that stands still unless every task hangs for HANG real seconds."""
    store = Store(str(tmp_path / "f.db"))
    hub = Hub(store, [], 16)
    ingest = Ingest(store, hub.notify_appended, hub.backlog, 1_000_000)
    looks = Looks(ingest)
    clock.autojump_threshold = HANG  # a hang moves the clock on; the asserts see it
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(ingest.serve)
            keeper = IndexKeeper(store, tmp_path / "ix", looks)
            yield Kept(store, hub, ingest, looks, keeper, nursery)
            nursery.cancel_scope.cancel()
    store.close()


async def test_the_keeper_holds_back_during_a_burst_and_catches_up_after_it(
    tmp_path: Path, mock_clock: MockClock
) -> None:
    """While a push is in flight the keeper indexes nothing, past BATCH_WAIT; once ingest has
    been idle for EASED seconds it catches up; a burst holds it back HOLD seconds at most."""
    async with _kept(tmp_path, mock_clock) as (store, hub, ingest, looks, keeper, nursery):
        await nursery.start(keeper.serve, hub.appended)
        while keeper.state != "ready":
            await keeper.moved()
        await _push(ingest, "a", "b", "c")
        with write_locked(store.path):
            done = await _held_push(ingest, nursery, "d")
            for _ in range(3):  # past BATCH_WAIT: a burst is no batch
                await looks.after(mock_clock, BATCH_WAIT)
                assert keeper.watermark == 0
        await done.wait()  # the lock let go, the push is answered: the burst eases
        await wait_all_tasks_blocked()
        assert keeper.watermark == 0  # until ingest has been idle for EASED seconds
        mock_clock.jump(2 * EASED)
        await keeper.wait_settled()
        assert keeper.watermark == store.last_seq == 4

        await _push(ingest, "e")
        with write_locked(store.path):
            done = await _held_push(ingest, nursery, "f")
            mock_clock.jump(HOLD)
            await keeper.moved()  # turn e is indexed, the burst still on
            assert (keeper.watermark, ingest.queued) == (5, 1)
        await done.wait()
        mock_clock.jump(BATCH_WAIT)
        await keeper.wait_settled()
        assert keeper.watermark == store.last_seq == 6


async def test_a_keeper_catching_up_holds_back_during_a_burst_too(
    tmp_path: Path, mock_clock: MockClock
) -> None:
    """A keeper started behind the log (a new index, a burst from the daemon's first moment)
    holds back as well: catching up chunk after chunk, it would never come to rest."""
    async with _kept(tmp_path, mock_clock) as (store, hub, ingest, looks, keeper, nursery):
        await _push(ingest, "a", "b", "c")
        with write_locked(store.path):
            done = await _held_push(ingest, nursery, "d")
            asked = looks.asked
            await nursery.start(keeper.serve, hub.appended)
            await asked.wait()
            for _ in range(3):
                await looks.after(mock_clock, BATCH_WAIT)
                assert (keeper.state, keeper.watermark) == ("opening", 0)
        await done.wait()
        mock_clock.jump(2 * EASED)
        await keeper.wait_settled()
        assert keeper.watermark == store.last_seq == 4
