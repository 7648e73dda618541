"""HTTP/1.1 on the Unix socket: connections and their limits, the route table, query strings;
the only layer that knows requests, responses and status codes."""

from __future__ import annotations

from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "Api": "routes",
    "HttpServer": "server",
    "ROUTES": "routes",
    "allowed": "table",
    "write_textfile": "scrape",
}
__all__ = [
    "ROUTES",
    "Api",
    "HttpServer",
    "allowed",
    "write_textfile",
]
__getattr__ = lazy_surface(__name__, _SURFACE)
