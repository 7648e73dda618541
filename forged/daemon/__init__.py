"""The daemon process: the root nursery that starts every service, its lifecycle, signals,
systemd's protocols, logging and the bundled model child it supervises."""

from __future__ import annotations

from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "backstop": None,
    "check_observers": "loader",
    "log": None,
    "run_daemon": "runner",
}
__all__ = [
    "backstop",
    "check_observers",
    "log",
    "run_daemon",
]
__getattr__ = lazy_surface(__name__, _SURFACE)
