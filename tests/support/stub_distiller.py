"""A distiller plugin for tests: no LLM, one fact per transcript line that states a preference."""

from __future__ import annotations

import trio

from forged.config import DistillerConfig
from forged.models import DistilledMemory, Fact
from forged.text.offload import WorkerProcess
from tests.support.offloads import stall_while_marked


class PreferenceDistiller:
    """Keeps every line containing "prefer" as a preference fact."""

    def __init__(self, config: DistillerConfig) -> None:
        self.model = f"stub:{config.model}"

    async def distill(self, transcript: str, *, attempt: int = 1) -> DistilledMemory:
        lines = [line.split(": ", 1)[-1] for line in transcript.splitlines() if "prefer" in line]
        facts = [Fact(kind="preference", text=line) for line in lines]
        return DistilledMemory(summary=f"{len(facts)} preferences stated.", facts=facts)


class Modelless:
    """Forgets to say which model it is."""

    def __init__(self, config: DistillerConfig) -> None:
        pass

    async def distill(self, transcript: str) -> DistilledMemory:
        return DistilledMemory(summary="", facts=[])


class Blocking:
    """A `distill` that is not async."""

    model = "blocking"

    def __init__(self, config: DistillerConfig) -> None:
        pass

    def distill(self, transcript: str) -> DistilledMemory:
        return DistilledMemory(summary="", facts=[])


class InventingDistiller:
    """Writes one fact the transcript supports, and a fact, a number and a summary it does not."""

    def __init__(self, config: DistillerConfig) -> None:
        self.model = f"inventing:{config.model}"

    async def distill(self, transcript: str, *, attempt: int = 1) -> DistilledMemory:
        facts = [
            Fact(kind="decision", text="We keep PostgreSQL for service 1."),
            Fact(kind="state", text="The team moved every service to Oracle."),
            Fact(kind="state", text="34"),
        ]
        return DistilledMemory(summary="", facts=facts)


class AttemptBlind:
    """A `distill` that cannot be told which try of a transcript it is."""

    def __init__(self, config: DistillerConfig) -> None:
        self.model = "blind"

    async def distill(self, transcript: str) -> DistilledMemory:
        return DistilledMemory(summary="", facts=[])


class StallingCheck:
    """Checks each transcript in the worker process, as the offline distiller does: a check
    that stalls while the transcript's marker is there (tests.support.offloads.stall_while_marked)."""

    model = "stalling-check"

    def __init__(self, config: DistillerConfig) -> None:
        self.worker = WorkerProcess()

    async def distill(self, transcript: str, *, attempt: int = 1) -> DistilledMemory:
        await self.worker.run(stall_while_marked, transcript)
        return DistilledMemory(summary="", facts=[])


class StallingThread:
    """Blocks a thread of the daemon while the transcript's marker is there: a plugin's call
    that nothing can cancel."""

    model = "stalling-thread"

    def __init__(self, config: DistillerConfig) -> None:
        pass

    async def distill(self, transcript: str, *, attempt: int = 1) -> DistilledMemory:
        await trio.to_thread.run_sync(stall_while_marked, transcript, 0.01)
        return DistilledMemory(summary="", facts=[])
