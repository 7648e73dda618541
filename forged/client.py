"""The Python client of the daemon: one method per API route, answers as forged's own Structs.

`Client` blocks, `AsyncClient` awaits (asyncio or trio); both speak HTTP over the Unix socket
with explicit timeouts, decode answers into the Structs the daemon encodes them from, and raise
an error answer as a `forged.errors.ApiError` subclass carrying its `code` and `message`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
import msgspec

from forged.config import DEFAULT_SOCKET, config_file, load_config
from forged.errors import ApiError, BadRequest, ClientError, Unavailable, Unreachable
from forged.models import (
    Accepted,
    ConsolidateAnswer,
    ContextAnswer,
    DeadLettersAnswer,
    ErrorAnswer,
    FactAudit,
    FactsPage,
    ForgetAnswer,
    Health,
    Interaction,
    RedistillReport,
    SearchAnswer,
    Status,
    StoredFact,
    StoredSummary,
    SummariesPage,
)

T = TypeVar("T")
TIMEOUT = httpx.Timeout(120.0, connect=5.0)  # seconds: a local daemon accepts at once or is down
BASE_URL = "http://forged"  # the host part is not used on a Unix socket, but httpx needs one
DEV_CONFIG = Path("config/forged.dev.toml")  # what `make run` serves with, in a source checkout
JSON = "application/json"
NDJSON = "application/x-ndjson"

_ENCODE = msgspec.json.Encoder()
_ERROR = msgspec.json.Decoder(ErrorAnswer)


def _checkout() -> Path | None:
    """The source checkout we run in (the working directory) or from (an editable install)."""
    for root in (Path.cwd(), Path(__file__).resolve().parent.parent):
        if (root / DEV_CONFIG).is_file():
            return root
    return None


def find_socket(
    socket: str | Path | None = None,
    *,
    config: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """The daemon's socket: `socket`, then `FORGED_SOCKET`, then the socket of the configuration
    the daemon would read (`config`, `FORGED_CONFIG`, `/etc/forged/forged.toml`), then, in or
    from a source checkout, the one `make run` serves on; the systemd default otherwise.
    """
    env = os.environ if env is None else env
    if socket:
        return str(socket)
    if env.get("FORGED_SOCKET"):
        return env["FORGED_SOCKET"]
    if (path := config_file(config, env)) is not None:
        return load_config(path, env).server.socket
    if (root := _checkout()) is not None:
        return os.path.normpath(root / load_config(root / DEV_CONFIG, {}).server.socket)
    return DEFAULT_SOCKET


@dataclass(frozen=True)
class _Call(Generic[T]):
    """One request to the daemon and the Struct its answer decodes into."""

    method: str
    path: str
    answer: type[T]
    params: dict[str, Any] = field(default_factory=dict)
    body: bytes | None = None
    content_type: str = JSON
    slow: bool = False  # no read timeout: the daemon waits on the LLM

    def request(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        params = {k: v for k, v in self.params.items() if v is not None}
        headers = {"content-type": self.content_type} if self.body is not None else {}
        timeout = None if self.slow else httpx.USE_CLIENT_DEFAULT
        return http.build_request(self.method, self.path, params=params, content=self.body,
                                  headers=headers, timeout=timeout)  # fmt: skip


def _api_error(response: httpx.Response) -> ApiError:
    """The daemon's error answer as an exception: 4xx `BadRequest`, 5xx `Unavailable`."""
    try:
        error = _ERROR.decode(response.content).error
        code, message = error.code, error.message
    except (msgspec.DecodeError, msgspec.ValidationError):
        code, message = "bad_answer", response.text[:200] or response.reason_phrase
    retry = response.headers.get("retry-after", "")
    retry_after = int(retry) if retry.isdigit() else None
    kind = BadRequest if response.status_code < 500 else Unavailable
    return kind(response.status_code, code, message, retry_after=retry_after)


def _decode(call: _Call[T], response: httpx.Response) -> T:
    if response.is_error:
        raise _api_error(response)
    try:
        return msgspec.json.decode(response.content, type=call.answer)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ClientError(f"forged answered {call.method} {call.path} with an unexpected body:"
                          f" {exc}") from exc  # fmt: skip


@contextmanager
def _transport_errors(socket: str) -> Iterator[None]:
    """Translate what can go wrong on the way to the daemon, once, into `Unreachable`."""
    try:
        yield
    except (httpx.ConnectError, FileNotFoundError, ConnectionRefusedError) as exc:
        raise Unreachable(
            f"cannot reach forged at {socket} ({exc}); is the daemon running?"
        ) from exc
    except httpx.TimeoutException as exc:
        raise Unreachable(f"forged at {socket} did not answer in time ({exc!r})") from exc
    except httpx.HTTPError as exc:
        raise Unreachable(f"talking to forged at {socket} failed: {exc}") from exc


def _push(interactions: Interaction | Iterable[Interaction]) -> _Call[Accepted]:
    if isinstance(interactions, Interaction):
        return _push_body(_ENCODE.encode(interactions))
    return _push_body(_ENCODE.encode(list(interactions)))


def _push_body(body: bytes, content_type: str = JSON) -> _Call[Accepted]:
    return _Call("POST", "/v1/interactions", Accepted, body=body, content_type=content_type)


def _search(q: str, **params: Any) -> _Call[SearchAnswer]:
    return _Call("GET", "/v1/search", SearchAnswer, {"q": q, **params})


def _context(q: str, **params: Any) -> _Call[ContextAnswer]:
    return _Call("GET", "/v1/context", ContextAnswer, {"q": q, **params})


def _facts(**params: Any) -> _Call[FactsPage]:
    return _Call("GET", "/v1/facts", FactsPage, params)


def _fact(fact_id: int) -> _Call[FactAudit]:
    return _Call("GET", f"/v1/facts/{fact_id}", FactAudit)


def _consolidate(scope: str | None) -> _Call[ConsolidateAnswer]:
    return _Call("POST", "/v1/consolidate", ConsolidateAnswer, {"scope": scope}, slow=True)


def _history(history: bool) -> str | None:
    return "true" if history else None


def _summaries(**params: Any) -> _Call[SummariesPage]:
    return _Call("GET", "/v1/summaries", SummariesPage, params)


def _forget(scope: str) -> _Call[ForgetAnswer]:
    return _Call("DELETE", "/v1/scopes/" + quote(scope, safe=""), ForgetAnswer)


def _seq_range(first: int | None, last: int | None) -> dict[str, Any]:
    return {"from": first, "to": last}


_STATUS = _Call("GET", "/v1/status", Status)
_HEALTH = _Call("GET", "/v1/health", Health)


def _dead_letters(first: int | None, last: int | None) -> _Call[DeadLettersAnswer]:
    return _Call("GET", "/v1/dead-letters", DeadLettersAnswer, _seq_range(first, last))


def _redistill(first: int | None, last: int | None) -> _Call[RedistillReport]:
    params = _seq_range(first, last)
    return _Call("POST", "/v1/dead-letters/redistill", RedistillReport, params, slow=True)


class Client:
    """A blocking client of the daemon; use it as a context manager or call `close()`."""

    def __init__(
        self,
        socket: str | Path | None = None,
        *,
        timeout: httpx.Timeout = TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.socket = find_socket(socket)
        # Plain HTTP on a Unix socket: no TLS, so no certificate store to load (0.2 s a client).
        transport = transport or httpx.HTTPTransport(uds=self.socket, verify=False)
        self._http = httpx.Client(transport=transport, base_url=BASE_URL, timeout=timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _Call[T]) -> T:
        with _transport_errors(self.socket):
            response = self._http.send(call.request(self._http))
        return _decode(call, response)

    def push(self, interactions: Interaction | Iterable[Interaction]) -> Accepted:
        """Store finished interactions (one, or several in one request); durable on return."""
        return self._send(_push(interactions))

    def push_body(self, body: bytes, content_type: str = JSON) -> Accepted:
        """Push a ready-made body: a JSON object or array (`JSON`), or NDJSON (`NDJSON`)."""
        return self._send(_push_body(body, content_type))

    def search(self, q: str, *, scope: str | None = None, kind: str | None = None,
               session: str | None = None, limit: int | None = None,
               **filters: str | None) -> SearchAnswer:  # fmt: skip
        """Memory matching the words of `q`, best first; `filters`: types, since, until, sources."""
        params = {"scope": scope, "kind": kind, "session": session, "limit": limit, **filters}
        return self._send(_search(q, **params))

    def context(self, q: str, *, scope: str | None = None, kind: str | None = None,
                session: str | None = None, budget_tokens: int | None = None,
                **filters: str | None) -> ContextAnswer:  # fmt: skip
        """The memory block for `q`, packed into `budget_tokens`; `filters`: types, since, until."""
        params = {"scope": scope, "kind": kind, "session": session, "budget_tokens": budget_tokens,
                  **filters}  # fmt: skip
        return self._send(_context(q, **params))

    def facts(self, *, scope: str | None = None, kind: str | None = None,
              after: str | None = None, limit: int | None = None,
              history: bool = False) -> FactsPage:  # fmt: skip
        """One page of current facts in id order (`history`: superseded ones too); pass its
        `next` as `after` for the following."""
        return self._send(_facts(scope=scope, kind=kind, after=after, limit=limit,
                                 history=_history(history)))  # fmt: skip

    def iter_facts(self, *, scope: str | None = None, kind: str | None = None,
                   history: bool = False) -> Iterator[StoredFact]:  # fmt: skip
        """Every current fact (`history`: every stored fact), page after page."""
        after = None
        while True:
            page = self.facts(scope=scope, kind=kind, after=after, history=history)
            yield from page.facts
            if (after := page.next) is None:
                return

    def fact(self, fact_id: int) -> FactAudit:
        """A fact, current or not, with what it replaced and what replaced it."""
        return self._send(_fact(fact_id))

    def consolidate(self, scope: str | None = None) -> ConsolidateAnswer:
        """Consolidate `scope` now (or every scope with new facts); waits on the model."""
        return self._send(_consolidate(scope))

    def summaries(self, *, scope: str | None = None, after: str | None = None,
                  limit: int | None = None) -> SummariesPage:  # fmt: skip
        """One page of stored summaries in id order."""
        return self._send(_summaries(scope=scope, after=after, limit=limit))

    def iter_summaries(self, *, scope: str | None = None) -> Iterator[StoredSummary]:
        """Every stored summary, page after page."""
        after = None
        while True:
            page = self.summaries(scope=scope, after=after)
            yield from page.summaries
            if (after := page.next) is None:
                return

    def forget(self, scope: str) -> ForgetAnswer:
        """Erase everything of a scope, for good."""
        return self._send(_forget(scope))

    def status(self) -> Status:
        return self._send(_STATUS)

    def health(self) -> Health:
        """`status="ok"` once ready; `Unavailable` (503 `not_ready`) before."""
        return self._send(_HEALTH)

    def dead_letters(self, first: int | None = None, last: int | None = None) -> DeadLettersAnswer:
        """The open dead letters with seq in the range."""
        return self._send(_dead_letters(first, last))

    def redistill(self, first: int | None = None, last: int | None = None) -> RedistillReport:
        """Distil the open dead letters again; waits as long as the model takes."""
        return self._send(_redistill(first, last))


class AsyncClient:
    """The same client for async code (asyncio or trio); `async with` or `await aclose()`."""

    def __init__(
        self,
        socket: str | Path | None = None,
        *,
        timeout: httpx.Timeout = TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.socket = find_socket(socket)
        # As the blocking client's: no TLS on a Unix socket.
        transport = transport or httpx.AsyncHTTPTransport(uds=self.socket, verify=False)
        self._http = httpx.AsyncClient(transport=transport, base_url=BASE_URL, timeout=timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _Call[T]) -> T:
        with _transport_errors(self.socket):
            response = await self._http.send(call.request(self._http))
        return _decode(call, response)

    async def push(self, interactions: Interaction | Iterable[Interaction]) -> Accepted:
        """Store finished interactions (one, or several in one request); durable on return."""
        return await self._send(_push(interactions))

    async def push_body(self, body: bytes, content_type: str = JSON) -> Accepted:
        """Push a ready-made body: a JSON object or array (`JSON`), or NDJSON (`NDJSON`)."""
        return await self._send(_push_body(body, content_type))

    async def search(self, q: str, *, scope: str | None = None, kind: str | None = None,
                     session: str | None = None, limit: int | None = None,
                     **filters: str | None) -> SearchAnswer:  # fmt: skip
        """Memory matching the words of `q`, best first; `filters`: types, since, until, sources."""
        params = {"scope": scope, "kind": kind, "session": session, "limit": limit, **filters}
        return await self._send(_search(q, **params))

    async def context(self, q: str, *, scope: str | None = None, kind: str | None = None,
                      session: str | None = None, budget_tokens: int | None = None,
                      **filters: str | None) -> ContextAnswer:  # fmt: skip
        """The memory block for `q`, packed into `budget_tokens`; `filters`: types, since, until."""
        params = {"scope": scope, "kind": kind, "session": session, "budget_tokens": budget_tokens,
                  **filters}  # fmt: skip
        return await self._send(_context(q, **params))

    async def facts(self, *, scope: str | None = None, kind: str | None = None,
                    after: str | None = None, limit: int | None = None,
                    history: bool = False) -> FactsPage:  # fmt: skip
        """One page of current facts in id order (`history`: superseded ones too); pass its
        `next` as `after` for the following."""
        return await self._send(_facts(scope=scope, kind=kind, after=after, limit=limit,
                                       history=_history(history)))  # fmt: skip

    async def iter_facts(self, *, scope: str | None = None, kind: str | None = None,
                         history: bool = False) -> AsyncIterator[StoredFact]:  # fmt: skip
        """Every current fact (`history`: every stored fact), page after page."""
        after = None
        while True:
            page = await self.facts(scope=scope, kind=kind, after=after, history=history)
            for fact in page.facts:
                yield fact
            if (after := page.next) is None:
                return

    async def fact(self, fact_id: int) -> FactAudit:
        """A fact, current or not, with what it replaced and what replaced it."""
        return await self._send(_fact(fact_id))

    async def consolidate(self, scope: str | None = None) -> ConsolidateAnswer:
        """Consolidate `scope` now (or every scope with new facts); waits on the model."""
        return await self._send(_consolidate(scope))

    async def summaries(self, *, scope: str | None = None, after: str | None = None,
                        limit: int | None = None) -> SummariesPage:  # fmt: skip
        """One page of stored summaries in id order."""
        return await self._send(_summaries(scope=scope, after=after, limit=limit))

    async def iter_summaries(self, *, scope: str | None = None) -> AsyncIterator[StoredSummary]:
        """Every stored summary, page after page."""
        after = None
        while True:
            page = await self.summaries(scope=scope, after=after)
            for summary in page.summaries:
                yield summary
            if (after := page.next) is None:
                return

    async def forget(self, scope: str) -> ForgetAnswer:
        """Erase everything of a scope, for good."""
        return await self._send(_forget(scope))

    async def status(self) -> Status:
        return await self._send(_STATUS)

    async def health(self) -> Health:
        """`status="ok"` once ready; `Unavailable` (503 `not_ready`) before."""
        return await self._send(_HEALTH)

    async def dead_letters(
        self, first: int | None = None, last: int | None = None
    ) -> DeadLettersAnswer:
        """The open dead letters with seq in the range."""
        return await self._send(_dead_letters(first, last))

    async def redistill(self, first: int | None = None, last: int | None = None) -> RedistillReport:
        """Distil the open dead letters again; waits as long as the model takes."""
        return await self._send(_redistill(first, last))
