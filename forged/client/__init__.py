"""The Python client: blocking and async twins with one method a route, the requests they
send, and where the daemon listens; `from forged.client import Client`."""

from __future__ import annotations

from forged.client.methods import JSON, NDJSON, AsyncClient, Client, find_socket
from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "BASE_URL": "methods",
    "TIMEOUT": "methods",
    "find_config": "methods",
}
__all__ = [
    "BASE_URL",
    "JSON",
    "NDJSON",
    "TIMEOUT",
    "AsyncClient",
    "Client",
    "find_config",
    "find_socket",
]
__getattr__ = lazy_surface(__name__, _SURFACE)
