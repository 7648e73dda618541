"""A search timed from another process: the daemon counts a process's reads as one client's, so
a probe of scope B run beside this process's hammering connections must be a client of its own.

`python -m bench.probe SOCKET TARGET SAMPLES` asks `GET TARGET` SAMPLES times over one
keep-alive connection and prints each answer's time in seconds, as a JSON list.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import msgspec
import trio

from bench.runner import Client

__all__ = ["timed_elsewhere"]

REPO = Path(__file__).resolve().parent.parent  # where `-m bench.probe` is found


async def _timed(socket: str, target: str, samples: int) -> list[float]:
    probe = await Client.connect(socket)
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        await probe.get(target)
        times.append(time.perf_counter() - started)
    await probe.aclose()
    return times


async def timed_elsewhere(socket: str, target: str, samples: int) -> list[float]:
    """`GET target` timed `samples` times by a child process: another client of the daemon."""
    command = [sys.executable, "-m", "bench.probe", socket, target, str(samples)]
    done = await trio.run_process(command, capture_stdout=True, cwd=REPO)
    return msgspec.json.decode(done.stdout, type=list[float])


if __name__ == "__main__":
    socket, target, samples = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sys.stdout.write(msgspec.json.encode(trio.run(_timed, socket, target, samples)).decode())
