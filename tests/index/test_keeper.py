"""The index keeper yields to ingest: it holds back during a burst and catches up after it."""

from __future__ import annotations

from pathlib import Path

import trio
from trio.testing import MockClock, wait_all_tasks_blocked

from forged.hub import Hub
from forged.index.keeper import BATCH_WAIT, HOLD, QUIET, IndexKeeper
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


async def test_the_keeper_holds_back_during_a_burst_and_catches_up_after_it(
    tmp_path: Path, mock_clock: MockClock
) -> None:
    """While a push is in flight the keeper indexes nothing, past BATCH_WAIT; once ingest has
    been idle for QUIET seconds it catches up; a burst holds it back HOLD seconds at most."""
    store = Store(str(tmp_path / "f.db"))
    hub = Hub(store, [], 16)
    ingest = Ingest(store, hub.notify_appended, hub.backlog, 1_000_000)
    looks = Looks(ingest)
    keeper = IndexKeeper(store, tmp_path / "ix", looks)
    mock_clock.autojump_threshold = HANG  # a hang moves the clock on; the asserts see it
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(ingest.serve)
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
            assert keeper.watermark == 0  # until ingest has been idle for QUIET seconds
            mock_clock.jump(2 * QUIET)
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
            nursery.cancel_scope.cancel()
    store.close()
