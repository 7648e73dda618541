"""Observer plugins for the tests, loaded by import path like any user's plugin."""

from __future__ import annotations

from typing import ClassVar

import msgspec
import trio

from forged.plugin_api import Feed, ObserverContext, Progress


class Recorder:
    """Records every seq it sees, in order; commits after each; can be held back."""

    name = "recorder"
    seen: ClassVar[list[int]] = []
    gate: ClassVar[trio.Event] = trio.Event()  # the test sets it to let the recorder drain
    fail_once_at: ClassVar[int | None] = None  # raise when this seq arrives, the first time only
    lives: ClassVar[int] = 0

    def __init__(self, context: ObserverContext[None]) -> None:
        self.context = context

    async def run(self, interactions: Feed, progress: Progress) -> None:
        type(self).lives += 1
        await type(self).gate.wait()
        async for item in interactions:
            if item.seq == type(self).fail_once_at:
                type(self).fail_once_at = None
                raise RuntimeError(f"plugin failed at seq {item.seq}")
            type(self).seen.append(item.seq)
            await progress.commit(item.seq)


class Quitter:
    """Commits the first interaction it gets, then returns: a plugin bug the hub must report."""

    lives: ClassVar[int] = 0

    def __init__(self, context: ObserverContext[None]) -> None:
        self.name = context.name

    async def run(self, interactions: Feed, progress: Progress) -> None:
        type(self).lives += 1
        await progress.commit((await interactions.receive()).seq)


class Threshold(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Settings of `Configured`."""

    label: str
    limit: int = msgspec.field(default=10)


class Configured:
    """Keeps its context, to show what a plugin is given."""

    Config = Threshold
    last: ClassVar[ObserverContext[Threshold] | None] = None

    def __init__(self, context: ObserverContext[Threshold]) -> None:
        self.name = context.name
        self.context = context
        type(self).last = context

    async def run(self, interactions: Feed, progress: Progress) -> None:
        async for item in interactions:
            await progress.commit(item.seq)


class NoRun:
    """Forgot its `run`."""

    name = "norun"

    def __init__(self, context: ObserverContext[None]) -> None:
        pass

    def start(self) -> None:
        pass


class BlockingRun:
    """A `run` that is not async."""

    name = "blocking"

    def __init__(self, context: ObserverContext[None]) -> None:
        pass

    def run(self, interactions: object, progress: object) -> None:
        pass


class Broken:
    """Cannot start: its constructor raises."""

    def __init__(self, context: ObserverContext[None]) -> None:
        raise OSError(13, "Permission denied")

    async def run(self, interactions: object, progress: object) -> None:
        pass


class Nameless:
    """Never sets its name."""

    def __init__(self, context: ObserverContext[None]) -> None:
        pass

    async def run(self, interactions: object, progress: object) -> None:
        pass
