"""The last resort of a shutdown: the process ends a few seconds after its work was cancelled,
whatever that work is still doing.

A cancelled task ends at its next checkpoint, and a worker process running a check is killed
(forged.text.offload); but a thread cannot be stopped, and a thread that does not return (a
plugin's blocking call, a read in a driver that ignores its interrupt) would keep the daemon
alive until SIGKILL, past any grace period systemd was promised. Nothing is lost by ending
anyway: what was accepted is committed, and what was in flight is still in the log, above the
watermark, and is done again on the next start.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import structlog

__all__ = ["EXIT_FORCED", "STOP_TIMEOUT", "arm"]

STOP_TIMEOUT = 5.0  # seconds cancelled work may take to end before the process ends anyway
EXIT_FORCED = 70  # the exit status then (EX_SOFTWARE): systemd shows the stop as failed

log = structlog.get_logger(__name__)


def _end_after(seconds: float) -> None:
    time.sleep(seconds)
    log.error("shutdown_forced", waited_s=seconds, threads=threading.active_count())
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(EXIT_FORCED)


def arm(seconds: float = STOP_TIMEOUT) -> None:
    """End the process `seconds` from now unless it has ended by itself (a daemon thread: a
    process that exits on its own is not held by it)."""
    threading.Thread(
        target=_end_after, args=(seconds,), name="forged-backstop", daemon=True
    ).start()
