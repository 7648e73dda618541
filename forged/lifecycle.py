"""The daemon's lifecycle: starting, then ready, then shutting down. The daemon moves it on;
the API and the status line only read it."""

from __future__ import annotations

import time

__all__ = ["Lifecycle"]


class Lifecycle:
    """Where the daemon is in its life; it only ever moves forward."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._ready = False
        self._shutting_down = False

    @property
    def ready(self) -> bool:
        """Every service has started: the socket listens and the store is open."""
        return self._ready

    @property
    def shutting_down(self) -> bool:
        """A stop signal came: new writes are refused while the work in hand drains."""
        return self._shutting_down

    def uptime(self) -> float:
        """Seconds since the daemon began to start."""
        return time.monotonic() - self._started

    def mark_ready(self) -> None:
        self._ready = True

    def begin_shutdown(self) -> None:
        self._shutting_down = True
