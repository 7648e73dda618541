"""Observer plugins for the tests, loaded by import path like any user's plugin."""

from __future__ import annotations

from typing import ClassVar

import trio

from forged.hub import Feed, Progress


class Recorder:
    """Records every seq it sees, in order; commits after each; can be held back."""

    name = "recorder"
    seen: ClassVar[list[int]] = []
    gate: ClassVar[trio.Event] = trio.Event()  # the test sets it to let the recorder drain
    fail_once_at: ClassVar[int | None] = None  # raise when this seq arrives, the first time only
    lives: ClassVar[int] = 0

    async def start(self, interactions: Feed, progress: Progress) -> None:
        type(self).lives += 1
        await type(self).gate.wait()
        async for item in interactions:
            if item.seq == type(self).fail_once_at:
                type(self).fail_once_at = None
                raise RuntimeError(f"plugin failed at seq {item.seq}")
            type(self).seen.append(item.seq)
            await progress.commit(item.seq)
