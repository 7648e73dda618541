"""The Python client of the daemon: one method per API route, answers as forged's own Structs.

`Client` blocks, `AsyncClient` awaits (asyncio or trio); both send the requests of
`forged.client.calls` over the Unix socket with explicit timeouts, so answers decode into the Structs
the daemon encodes them from and an error answer is raised as a `forged.errors.ApiError`
subclass carrying its `code` and `message`. `find_socket` says where the daemon listens.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Protocol, TypeVar

import httpx
import msgspec

from forged import models
from forged.client import calls
from forged.client.calls import JSON, NDJSON, Call, T
from forged.config import DEFAULT_SOCKET, Config, config_file, load_config

__all__ = ["JSON", "NDJSON", "AsyncClient", "Client", "find_config", "find_socket"]
TIMEOUT = httpx.Timeout(120.0, connect=5.0)  # seconds: a local daemon accepts at once or is down
BASE_URL = "http://forged"  # the host part is not used on a Unix socket, but httpx needs one
DEV_CONFIG = Path("config/forged.dev.toml")  # what `make run` serves with, in a source checkout


class _Page(Protocol):
    """One page of a listing (`FactsPage`, `SummariesPage`)."""

    next: str | None  # the cursor of the following page; None on the last


P = TypeVar("P", bound=_Page)


def _checkout() -> Path | None:
    """The source checkout we run in (the working directory) or from (an editable install)."""
    for root in (Path.cwd(), Path(__file__).resolve().parent.parent.parent):
        if (root / DEV_CONFIG).is_file():
            return root
    return None


def _pages(page: Callable[[str | None], P]) -> Iterator[P]:
    """A listing, page after page: each asked for with the cursor the one before gave."""
    after = None
    while True:
        yield (got := page(after))
        if (after := got.next) is None:
            return


async def _apages(page: Callable[[str | None], Awaitable[P]]) -> AsyncIterator[P]:
    """`_pages` for the async client."""
    after = None
    while True:
        yield (got := await page(after))
        if (after := got.next) is None:
            return


def _rooted(config: Config, root: Path) -> Config:
    """The dev configuration with its paths (relative to the checkout) made absolute."""
    server = msgspec.structs.replace(
        config.server, socket=os.path.normpath(root / config.server.socket)
    )
    store = config.store
    if store.backend == "sqlite":
        store = msgspec.structs.replace(store, path=os.path.normpath(root / store.path))
    return msgspec.structs.replace(config, server=server, store=store)


def find_config(
    config: str | Path | None = None, env: Mapping[str, str] | None = None
) -> tuple[Config, str]:
    """The configuration of the daemon the commands talk to, and where it was read from: the
    one it would read (`config`, `FORGED_CONFIG`, `/etc/forged/forged.toml`), then, in or from
    a source checkout, the one `make run` serves with; the embedded defaults otherwise.
    """
    env = os.environ if env is None else env
    if (path := config_file(config, env)) is not None:
        return load_config(path, env), str(path)
    if (root := _checkout()) is not None:
        dev = root / DEV_CONFIG
        return _rooted(load_config(dev, env), root), f"{dev} (what `make run` serves with)"
    return load_config(None, env), "embedded defaults"


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
    if config_file(config, env) is None and _checkout() is None:
        return DEFAULT_SOCKET
    return find_config(config, env)[0].server.socket


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

    def _send(self, call: Call[T]) -> T:
        with calls.transport_errors(self.socket):
            response = self._http.send(call.request(self._http))
        return calls.decode(call, response)

    def push(
        self, interactions: models.Interaction | Iterable[models.Interaction]
    ) -> models.Accepted:
        """Store finished interactions (one, or several in one request); durable on return."""
        return self._send(calls.push(interactions))

    def push_body(self, body: bytes, content_type: str = JSON) -> models.Accepted:
        """Push a ready-made body: a JSON object or array (`JSON`), or NDJSON (`NDJSON`)."""
        return self._send(calls.push_body(body, content_type))

    def search(
        self,
        q: str,
        *,
        scope: str | None = None,
        kind: str | None = None,
        session: str | None = None,
        limit: int | None = None,
        **filters: str | None,
    ) -> models.SearchAnswer:
        """Memory matching the words of `q`, best first; `filters`: types, since, until, sources."""
        params = {"scope": scope, "kind": kind, "session": session, "limit": limit, **filters}
        return self._send(calls.search(q, **params))

    def context(
        self,
        q: str,
        *,
        scope: str | None = None,
        kind: str | None = None,
        session: str | None = None,
        budget_tokens: int | None = None,
        **filters: str | None,
    ) -> models.ContextAnswer:
        """The memory block for `q`, packed into `budget_tokens`; `filters`: types, since, until."""
        params = {
            "scope": scope,
            "kind": kind,
            "session": session,
            "budget_tokens": budget_tokens,
            **filters,
        }
        return self._send(calls.context(q, **params))

    def facts(
        self,
        *,
        scope: str | None = None,
        kind: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        history: bool = False,
        all_scopes: bool = False,
    ) -> models.FactsPage:
        """One page of current facts of `scope` ("default" when None; every scope with
        `all_scopes`) in id order (`history`: superseded ones too); pass its `next` as `after`
        for the following."""
        return self._send(
            calls.facts(
                scope=scope,
                kind=kind,
                after=after,
                limit=limit,
                history=history,
                all_scopes=all_scopes,
            )
        )

    def iter_facts(
        self,
        *,
        scope: str | None = None,
        kind: str | None = None,
        history: bool = False,
        all_scopes: bool = False,
    ) -> Iterator[models.StoredFact]:
        """Every current fact (`history`: every stored fact), page after page."""
        pages = _pages(
            lambda after: self.facts(
                scope=scope, kind=kind, after=after, history=history, all_scopes=all_scopes
            )
        )
        return (fact for page in pages for fact in page.facts)

    def fact(
        self, fact_id: int, *, scope: str | None = None, all_scopes: bool = False
    ) -> models.FactAudit:
        """A fact of `scope`, current or not, with what it replaced and what replaced it."""
        return self._send(calls.fact(fact_id, scope=scope, all_scopes=all_scopes))

    def consolidate(self, scope: str | None = None) -> models.ConsolidateAnswer:
        """Consolidate `scope` now (or every scope with new facts); waits on the model."""
        return self._send(calls.consolidate(scope))

    def summaries(
        self,
        *,
        scope: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        all_scopes: bool = False,
    ) -> models.SummariesPage:
        """One page of stored summaries in id order."""
        return self._send(
            calls.summaries(scope=scope, after=after, limit=limit, all_scopes=all_scopes)
        )

    def iter_summaries(
        self, *, scope: str | None = None, all_scopes: bool = False
    ) -> Iterator[models.StoredSummary]:
        """Every stored summary, page after page."""
        pages = _pages(
            lambda after: self.summaries(scope=scope, after=after, all_scopes=all_scopes)
        )
        return (summary for page in pages for summary in page.summaries)

    def scopes(self) -> models.ScopesAnswer:
        """Every scope holding memory, with its counts and last activity, most recent first."""
        return self._send(calls.SCOPES)

    def iter_interactions(
        self, *, scope: str | None = None, since: str | None = None, until: str | None = None
    ) -> Iterator[models.LoggedInteraction]:
        """Every interaction of `scope` (`default` unless named) in time order, page after page."""
        pages = _pages(
            lambda after: self.interactions(scope=scope, since=since, until=until, after=after)
        )
        return (item for page in pages for item in page.interactions)

    def interactions(
        self,
        *,
        scope: str | None = None,
        since: str | None = None,
        until: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> models.InteractionsPage:
        """One page of a scope's interactions ordered by their timestamps; `next` for more."""
        return self._send(
            calls.interactions(scope, since=since, until=until, after=after, limit=limit)
        )

    def delete(
        self, item: str, item_id: int, *, scope: str | None = None, all_scopes: bool = False
    ) -> models.Erased:
        """Erase one `fact`, `summary` or `interaction` (by seq) for good; a deleted interaction
        takes the memory resting on it alone with it. Only one of `scope` (`default` if None),
        or of any scope with `all_scopes`: another scope's item is missing."""
        return self._send(calls.delete(item, item_id, scope=scope, all_scopes=all_scopes))

    def correct(
        self,
        fact_id: int,
        text: str,
        kind: models.FactKind | None = None,
        *,
        scope: str | None = None,
        all_scopes: bool = False,
        at: str | None = None,
    ) -> models.FactAudit:
        """Replace a current fact of `scope` (the scope rule, as `delete`) by `text` (reason
        `user`), dated `at` or like the fact; returns the new fact's audit."""
        call = calls.correct(fact_id, text, kind, scope=scope, all_scopes=all_scopes, at=at)
        return self._send(call)

    def add_fact(
        self,
        text: str,
        *,
        kind: models.FactKind = "state",
        scope: str = "default",
        at: str | None = None,
        session: str | None = None,
    ) -> models.FactAudit:
        """Write a fact by hand (`source` user), dated `at` (ISO 8601) or now."""
        return self._send(calls.add_fact(models.NewFact(text, kind, scope, session, at)))

    def pin(
        self,
        fact_id: int,
        pinned: bool = True,
        *,
        scope: str | None = None,
        all_scopes: bool = False,
    ) -> models.FactAudit:
        """Pin a fact of `scope` (the scope rule, as `delete`) so consolidation never retires
        it (`pinned=False` unpins)."""
        return self._send(calls.pin(fact_id, pinned, scope=scope, all_scopes=all_scopes))

    def edits(
        self, *, scope: str | None = None, all_scopes: bool = False, limit: int | None = None
    ) -> models.EditsAnswer:
        """The edit trail of `scope` (`default` if None) or of every scope, newest first."""
        return self._send(calls.edits(scope=scope, all_scopes=all_scopes, limit=limit))

    def forget(self, scope: str) -> models.ForgetAnswer:
        """Erase everything of a scope, for good."""
        return self._send(calls.forget(scope))

    def status(self) -> models.Status:
        return self._send(calls.STATUS)

    def reindex(self) -> models.IndexStatus:
        """Rewrite the turn index from the store; `status().index` follows it."""
        return self._send(calls.REINDEX)

    def health(self) -> models.Health:
        """`status="ok"` once ready; `Unavailable` (503 `not_ready`) before."""
        return self._send(calls.HEALTH)

    def dead_letters(
        self,
        first: int | None = None,
        last: int | None = None,
        *,
        scope: str | None = None,
        all_scopes: bool = False,
    ) -> models.DeadLettersAnswer:
        """The open dead letters of `scope` with seq in the range."""
        return self._send(calls.dead_letters(first, last, scope=scope, all_scopes=all_scopes))

    def redistill(
        self, first: int | None = None, last: int | None = None
    ) -> models.RedistillReport:
        """Distil the open dead letters again; waits as long as the model takes."""
        return self._send(calls.redistill(first, last))


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

    async def _send(self, call: Call[T]) -> T:
        with calls.transport_errors(self.socket):
            response = await self._http.send(call.request(self._http))
        return calls.decode(call, response)

    async def push(
        self, interactions: models.Interaction | Iterable[models.Interaction]
    ) -> models.Accepted:
        """Store finished interactions (one, or several in one request); durable on return."""
        return await self._send(calls.push(interactions))

    async def push_body(self, body: bytes, content_type: str = JSON) -> models.Accepted:
        """Push a ready-made body: a JSON object or array (`JSON`), or NDJSON (`NDJSON`)."""
        return await self._send(calls.push_body(body, content_type))

    async def search(
        self,
        q: str,
        *,
        scope: str | None = None,
        kind: str | None = None,
        session: str | None = None,
        limit: int | None = None,
        **filters: str | None,
    ) -> models.SearchAnswer:
        """Memory matching the words of `q`, best first; `filters`: types, since, until, sources."""
        params = {"scope": scope, "kind": kind, "session": session, "limit": limit, **filters}
        return await self._send(calls.search(q, **params))

    async def context(
        self,
        q: str,
        *,
        scope: str | None = None,
        kind: str | None = None,
        session: str | None = None,
        budget_tokens: int | None = None,
        **filters: str | None,
    ) -> models.ContextAnswer:
        """The memory block for `q`, packed into `budget_tokens`; `filters`: types, since, until."""
        params = {
            "scope": scope,
            "kind": kind,
            "session": session,
            "budget_tokens": budget_tokens,
            **filters,
        }
        return await self._send(calls.context(q, **params))

    async def facts(
        self,
        *,
        scope: str | None = None,
        kind: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        history: bool = False,
        all_scopes: bool = False,
    ) -> models.FactsPage:
        """One page of current facts of `scope` ("default" when None; every scope with
        `all_scopes`) in id order (`history`: superseded ones too); pass its `next` as `after`
        for the following."""
        return await self._send(
            calls.facts(
                scope=scope,
                kind=kind,
                after=after,
                limit=limit,
                history=history,
                all_scopes=all_scopes,
            )
        )

    async def iter_facts(
        self,
        *,
        scope: str | None = None,
        kind: str | None = None,
        history: bool = False,
        all_scopes: bool = False,
    ) -> AsyncIterator[models.StoredFact]:
        """Every current fact (`history`: every stored fact), page after page."""
        pages = _apages(
            lambda after: self.facts(
                scope=scope, kind=kind, after=after, history=history, all_scopes=all_scopes
            )
        )
        async for page in pages:
            for fact in page.facts:
                yield fact

    async def fact(
        self, fact_id: int, *, scope: str | None = None, all_scopes: bool = False
    ) -> models.FactAudit:
        """A fact of `scope`, current or not, with what it replaced and what replaced it."""
        return await self._send(calls.fact(fact_id, scope=scope, all_scopes=all_scopes))

    async def consolidate(self, scope: str | None = None) -> models.ConsolidateAnswer:
        """Consolidate `scope` now (or every scope with new facts); waits on the model."""
        return await self._send(calls.consolidate(scope))

    async def summaries(
        self,
        *,
        scope: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        all_scopes: bool = False,
    ) -> models.SummariesPage:
        """One page of stored summaries in id order."""
        return await self._send(
            calls.summaries(scope=scope, after=after, limit=limit, all_scopes=all_scopes)
        )

    async def iter_summaries(
        self, *, scope: str | None = None, all_scopes: bool = False
    ) -> AsyncIterator[models.StoredSummary]:
        """Every stored summary, page after page."""
        pages = _apages(
            lambda after: self.summaries(scope=scope, after=after, all_scopes=all_scopes)
        )
        async for page in pages:
            for summary in page.summaries:
                yield summary

    async def scopes(self) -> models.ScopesAnswer:
        """Every scope holding memory, with its counts and last activity, most recent first."""
        return await self._send(calls.SCOPES)

    async def interactions(
        self,
        *,
        scope: str | None = None,
        since: str | None = None,
        until: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> models.InteractionsPage:
        """One page of a scope's interactions ordered by their timestamps; `next` for more."""
        return await self._send(
            calls.interactions(scope, since=since, until=until, after=after, limit=limit)
        )

    async def delete(
        self, item: str, item_id: int, *, scope: str | None = None, all_scopes: bool = False
    ) -> models.Erased:
        """Erase one `fact`, `summary` or `interaction` (by seq) for good; a deleted interaction
        takes the memory resting on it alone with it. Only one of `scope` (`default` if None),
        or of any scope with `all_scopes`: another scope's item is missing."""
        return await self._send(calls.delete(item, item_id, scope=scope, all_scopes=all_scopes))

    async def correct(
        self,
        fact_id: int,
        text: str,
        kind: models.FactKind | None = None,
        *,
        scope: str | None = None,
        all_scopes: bool = False,
        at: str | None = None,
    ) -> models.FactAudit:
        """Replace a current fact of `scope` (the scope rule, as `delete`) by `text` (reason
        `user`), dated `at` or like the fact; returns the new fact's audit."""
        call = calls.correct(fact_id, text, kind, scope=scope, all_scopes=all_scopes, at=at)
        return await self._send(call)

    async def add_fact(
        self,
        text: str,
        *,
        kind: models.FactKind = "state",
        scope: str = "default",
        at: str | None = None,
        session: str | None = None,
    ) -> models.FactAudit:
        """Write a fact by hand (`source` user), dated `at` (ISO 8601) or now."""
        return await self._send(calls.add_fact(models.NewFact(text, kind, scope, session, at)))

    async def pin(
        self,
        fact_id: int,
        pinned: bool = True,
        *,
        scope: str | None = None,
        all_scopes: bool = False,
    ) -> models.FactAudit:
        """Pin a fact of `scope` (the scope rule, as `delete`) so consolidation never retires
        it (`pinned=False` unpins)."""
        return await self._send(calls.pin(fact_id, pinned, scope=scope, all_scopes=all_scopes))

    async def edits(
        self, *, scope: str | None = None, all_scopes: bool = False, limit: int | None = None
    ) -> models.EditsAnswer:
        """The edit trail of `scope` (`default` if None) or of every scope, newest first."""
        return await self._send(calls.edits(scope=scope, all_scopes=all_scopes, limit=limit))

    async def forget(self, scope: str) -> models.ForgetAnswer:
        """Erase everything of a scope, for good."""
        return await self._send(calls.forget(scope))

    async def status(self) -> models.Status:
        return await self._send(calls.STATUS)

    async def reindex(self) -> models.IndexStatus:
        """Rewrite the turn index from the store; `status().index` follows it."""
        return await self._send(calls.REINDEX)

    async def health(self) -> models.Health:
        """`status="ok"` once ready; `Unavailable` (503 `not_ready`) before."""
        return await self._send(calls.HEALTH)

    async def dead_letters(
        self,
        first: int | None = None,
        last: int | None = None,
        *,
        scope: str | None = None,
        all_scopes: bool = False,
    ) -> models.DeadLettersAnswer:
        """The open dead letters of `scope` with seq in the range."""
        return await self._send(calls.dead_letters(first, last, scope=scope, all_scopes=all_scopes))

    async def redistill(
        self, first: int | None = None, last: int | None = None
    ) -> models.RedistillReport:
        """Distil the open dead letters again; waits as long as the model takes."""
        return await self._send(calls.redistill(first, last))
