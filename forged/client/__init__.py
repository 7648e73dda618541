"""The Python client: blocking and async twins with one method a route, the requests they
send, and where the daemon listens; `from forged.client import Client`."""
