"""Where CPU work on untrusted text runs: in a worker process, under a deadline, killed when it
runs past it.

Rendering a transcript, picking its lines and grounding an answer cost time that grows with the
text a client or a model sent. The event loop never waits on it: it runs in a process of a
small pool (trio-parallel), so it neither blocks the loop nor holds the GIL the loop needs.
A worker that overruns its deadline is killed, whatever it was doing: a thread cannot be
stopped from outside, and one left running would burn a core (and the GIL) for as long as the
input lasts, once more at every split of the batch that carries it. The caller gets
`CheckOverrun` and treats it like an answer the model could not give: it splits the batch, and
in the end writes the one interaction that overruns alone to the dead letters.

The work and its arguments cross to the worker pickled: work is a module-level function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import trio
import trio_parallel

from forged.errors import CheckOverrun

__all__ = ["CHECK_TIMEOUT", "Offload", "WorkerProcess"]

T = TypeVar("T")
CHECK_TIMEOUT = 30.0  # seconds one piece of work may take: 1 MB of text takes well under one


def _ready() -> None:
    """Nothing: run first, it has a worker process started (or takes an idle one)."""


class Offload(Protocol):
    """Runs CPU work on untrusted text away from the event loop (tests put in their own)."""

    async def run(self, work: Callable[..., T], *args: Any) -> T: ...


class WorkerProcess:
    """Work in a pooled worker process, one piece at a time per `limiter`, stopped (the
    process killed) after `deadline` seconds with `CheckOverrun`."""

    def __init__(
        self, deadline: float = CHECK_TIMEOUT, limiter: trio.CapacityLimiter | None = None
    ) -> None:
        self.deadline = deadline
        self.limiter = limiter or trio.CapacityLimiter(1)

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        async with self.limiter:  # the deadline starts once it is this work's turn
            await trio_parallel.run_sync(_ready)  # a worker started: its start is not the work's
            with trio.move_on_after(self.deadline):
                done: T = await trio_parallel.run_sync(work, *args, kill_on_cancel=True)
                return done
        raise CheckOverrun(f"{work.__name__} ran past its deadline of {self.deadline:g} s")
