"""Observer plugins for the tests, loaded by import path like any user's plugin."""

from __future__ import annotations

import trio

from forged.hub import Progress
from forged.models import StoredInteraction


class Recorder:
    """Records every seq it sees, in order; commits after each; can be held back."""

    name = "recorder"
    seen: list[int] = []
    gate = trio.Event()  # the test sets it (or replaces it) to let the recorder drain
    fail_once_at: int | None = None  # raise when this seq arrives, the first time only
    lives = 0

    async def start(
        self, interactions: trio.MemoryReceiveChannel[StoredInteraction], progress: Progress
    ) -> None:
        type(self).lives += 1
        await type(self).gate.wait()
        async for item in interactions:
            if item.seq == type(self).fail_once_at:
                type(self).fail_once_at = None
                raise RuntimeError(f"plugin failed at seq {item.seq}")
            type(self).seen.append(item.seq)
            await progress.commit(item.seq)
