"""The memory browser (`forged ui`): a page on loopback, its own small HTTP server with the
one-time token, session header, Host and Origin checks, talking to the daemon only through
`forged.client`."""

from __future__ import annotations

from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "serve": "server",
}
__all__ = [
    "serve",
]
__getattr__ = lazy_surface(__name__, _SURFACE)
