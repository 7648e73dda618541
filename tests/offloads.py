"""Offloads for tests: work run where it is called (unit tests of the batch logic, which start
no process), and the real worker process with grounding swapped for a check that never ends
on a poisoned interaction."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from forged.distill.batches import ground
from forged.models import DistilledMemory, StoredInteraction
from forged.text.offload import WorkerProcess

T = TypeVar("T")
STALL = "STALL"  # a turn whose text holds this, then a path, stalls the swapped grounding


class OnTheLoop:
    """Runs the work where it is called: for tests that start no process."""

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        return work(*args)


def ground_or_stall(memory: DistilledMemory, items: list[StoredInteraction]) -> Any:
    """`ground`, except that a poisoned turn makes it write its pid beside the path the turn
    names and spin until it is killed: a check that never ends, with no input of its own."""
    for item in items:
        for message in item.messages:
            if message.text.startswith(STALL):
                path = Path(message.text.removeprefix(STALL).strip())
                with path.open("a") as pids:
                    pids.write(f"{os.getpid()}\n")
                while True:
                    pass
    return ground(memory, items)


class StallingGround:
    """The real worker process, its deadline short, with `ground` swapped for
    `ground_or_stall`: every other piece of work is as in the daemon."""

    def __init__(self, deadline: float) -> None:
        self.worker = WorkerProcess(deadline)

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        swapped: Callable[..., T] = ground_or_stall if work is ground else work
        return await self.worker.run(swapped, *args)
