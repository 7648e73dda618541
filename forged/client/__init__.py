"""The Python client: blocking and async twins with one method a route, the requests they
send, and where the daemon listens; `from forged.client import Client`."""

from __future__ import annotations

from forged.client.methods import JSON, NDJSON, AsyncClient, Client, find_socket

__all__ = ["JSON", "NDJSON", "AsyncClient", "Client", "find_socket"]
