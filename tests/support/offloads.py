"""Offloads for tests: work run where it is called (unit tests of the batch logic, which start
no process), and the real worker process with grounding swapped for a check that never ends
on a poisoned interaction."""

from __future__ import annotations

import os
import re
import threading
import time
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


def stall_while_marked(transcript: str, pause: float = 0.0) -> None:
    """A check that stalls on a transcript naming a directory (`STALL <dir>`) while the file
    `marker` is there: it first writes its pid into the FIFO `started` (the test reads it, an
    event), then spins (or sleeps `pause` at a time) until the marker is gone."""
    found = re.search(rf"{STALL} (\S+)", transcript)
    if found is None or not (marker := Path(found[1]) / "marker").exists():
        return
    with (Path(found[1]) / "started").open("w") as started:
        started.write(f"{os.getpid()} {threading.get_ident()}\n")
    while marker.exists():
        time.sleep(pause)
