"""The local API: routes HTTP requests on the Unix socket to ingest, status and recall."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import msgspec
import structlog

from forged import __version__
from forged.config import Config
from forged.distill.deadletters import Redistiller
from forged.errors import InvalidRequest, StorageFull, StoreError
from forged.http import edits, scrape, work
from forged.http.connection import HttpError, Request, Response, error_response, refusal_response
from forged.http.params import SCOPED, Params, checked_key
from forged.http.table import Bound, Handler, Route, RouteTable
from forged.hub import Hub
from forged.ingest.pipeline import Ingest, read_body
from forged.lifecycle import Lifecycle
from forged.metrics import CONTENT_TYPE
from forged.models import (
    DEFAULT_SCOPE,
    FACT_KINDS,
    MEMORY_TYPES,
    RECALL_KINDS,
    ForgetAnswer,
    Health,
    LogStatus,
    SearchAnswer,
    Status,
    StoreStatus,
)
from forged.recall.engine import Recall, TurnIndexSource
from forged.recall.listing import PAGE_DEFAULT, PAGE_MAX, Page
from forged.recall.meaning import Meaning
from forged.recall.query import SearchQuery, dropped_words, kind_type
from forged.store.backend import Backend

__all__ = [
    "FACTS_PREFIX",
    "MAX_ID_DIGITS",
    "ROUTES",
    "SCOPES_PREFIX",
    "SHUTDOWN_RETRY_AFTER",
    "Api",
    "json_response",
]

SHUTDOWN_RETRY_AFTER = 2  # seconds a client is told to wait while the daemon restarts
SCOPES_PREFIX = "/v1/scopes/"  # DELETE /v1/scopes/{scope} forgets a scope
MAX_ID_DIGITS = 18  # a fact id in a path: at most this many digits, so it fits SQLite's integer

_JSON = msgspec.json.Encoder()
log = structlog.get_logger(__name__)
_SEARCH = ("q", "scope", "kind", "types", "session", "since", "until", "history")
_PAGE = ("since", "until", "after", "limit")  # listings
FACTS_PREFIX = "/v1/facts/"  # GET /v1/facts/{id}: a fact and its audit trail
SUMMARIES_PREFIX = "/v1/summaries/"  # DELETE /v1/summaries/{id}
INTERACTIONS_PREFIX = "/v1/interactions/"  # DELETE /v1/interactions/{seq}
# A failed store as an answer, by whether the disk is full: log event, status, code, what
# happened, and when to retry (a full disk waits for an operator: no Retry-After).
_STORE_FAILURES = (
    ("store_failed", 503, "store_unavailable", "the database is unavailable", 1),
    ("storage_full", 507, "storage_full", "the disk holding the database is full", None),
)


def _history(params: Params) -> bool:
    """`history=true`: superseded facts (and condensed summaries) too, marked and dated."""
    return params.choice("history", ("true", "false")) == "true"


def _store_failure(exc: StoreError) -> Response:
    """The answer to a request the store failed: nothing of it was stored."""
    event, status, code, what, retry_after = _STORE_FAILURES[isinstance(exc, StorageFull)]
    log.error(event, error=str(exc))
    return error_response(status, code, f"{what}; nothing of this request was stored", retry_after)


def json_response(value: Any, status: int = 200) -> Response:
    return Response(status, _JSON.encode(value))


class Api:
    """Request handlers, and the table that maps paths and methods onto them."""

    def __init__(
        self,
        config: Config,
        store: Backend,
        hub: Hub,
        ingest: Ingest,
        lifecycle: Lifecycle,
        redistiller: Redistiller | None,
        turns: TurnIndexSource | None = None,
        meaning: Meaning | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.hub = hub
        self.ingest = ingest
        self.lifecycle = lifecycle
        self.recall = Recall(store, config.recall, turns, meaning)
        self.turns = turns
        self.meaning = meaning
        self.redistiller = redistiller
        self.table = RouteTable(self, ROUTES)

    def _methods(self, request: Request) -> tuple[dict[str, Bound] | None, str]:
        """The request's route's methods, and the route as the metrics name it: its path as
        the table writes it, never the item a path names (a scope is the users' data)."""
        path, methods = self.table.find(request.path)
        return methods, "other" if path is None else path

    async def handle(self, request: Request) -> Response:
        """Answer one request, timed by route; errors become the API's error shape."""
        started = time.monotonic()
        methods, route = self._methods(request)
        response = await self._answer(request, methods)
        method = scrape.method_label(request.method)
        self.hub.metrics.requests.labels(route, method, str(response.status)).observe(
            time.monotonic() - started
        )
        return response

    async def _answer(self, request: Request, methods: dict[str, Bound] | None) -> Response:
        """The answer to one request; an error is the API's error shape, never a traceback."""
        if methods is None:
            return error_response(404, "not_found", f"no such path: {request.path}")
        # HEAD is GET without the body; the server sends only the head
        route = methods.get("GET" if request.method == "HEAD" else request.method)
        if route is None:
            allowed = ", ".join(methods)
            return error_response(405, "method_not_allowed", f"{request.path} accepts {allowed}")
        if self.lifecycle.shutting_down and request.method not in ("GET", "HEAD"):
            return error_response(
                503, "shutting_down", "forged is shutting down; retry shortly", SHUTDOWN_RETRY_AFTER
            )
        try:
            return await route.handler(request, Params(request.query, request.path, route.params))
        except InvalidRequest as exc:
            return refusal_response(exc)
        except StoreError as exc:
            return _store_failure(exc)
        except Exception:  # a bug must cost one request, not the daemon, and leak no traceback
            log.exception("request_failed", method=request.method, path=request.path)
            return error_response(500, "internal_error", "internal error; see the daemon's log")

    async def push(self, request: Request, _params: Params) -> Response:
        content_type = request.headers.get("content-type", "")
        items = await read_body(request.body, content_type, self.config.server)
        answer = await self.ingest.push(items)
        metrics = self.hub.metrics
        metrics.accepted.inc(answer.accepted)
        metrics.duplicates.inc(answer.duplicates)
        metrics.accepted_bytes.inc(len(request.body))
        return json_response(answer, 202)

    async def metrics(self, _request: Request, _params: Params) -> Response:
        state = await scrape.snapshot(self.store, self.hub, self.lifecycle)
        return Response(200, self.hub.metrics.render(state), CONTENT_TYPE)

    async def status(self, _request: Request, _params: Params) -> Response:
        await self.hub.refresh()  # totals and backlogs as the store has them
        return json_response(
            Status(
                version=__version__,
                uptime_s=round(self.lifecycle.uptime(), 3),
                ready=self.lifecycle.ready,
                shutting_down=self.lifecycle.shutting_down,
                log=LogStatus(last_seq=self.store.last_seq, count=self.store.count),
                observers=self.hub.statuses(),
                store=StoreStatus(self.store.backend, self.store.schema_version),
                index=None if self.turns is None else self.turns.status(),
            )
        )

    async def reindex(self, _request: Request, _params: Params) -> Response:
        """Rewrite the turn index from the store (`forged reindex`)."""
        if self.turns is None:
            raise HttpError(409, "index_disabled", "the turn index is turned off ([index] enabled)")
        self.turns.rebuild()
        return json_response(self.turns.status(), status=202)

    async def health(self, _request: Request, _params: Params) -> Response:
        if not self.lifecycle.ready or self.lifecycle.shutting_down:
            return error_response(503, "not_ready", "forged is not ready")
        return json_response(Health("ok"))

    def _search_query(self, params: Params, limit: int) -> SearchQuery:
        kind = params.choice("kind", RECALL_KINDS)
        types = params.choices("types", MEMORY_TYPES)
        if kind is not None and types is not None and kind_type(kind) not in types:
            raise HttpError(
                400,
                "invalid_parameter",
                f"`kind` {kind} is a {kind_type(kind)}"
                f", which `types` ({','.join(types)}) leaves out",
            )
        since, until = params.period()
        return SearchQuery(
            q=params.text("q"),
            scope=params.key("scope", DEFAULT_SCOPE) or DEFAULT_SCOPE,
            kind=kind,
            session=params.key("session"),
            limit=limit,
            types=types or MEMORY_TYPES,
            since=since,
            until=until,
            sources=params.choice("sources", ("true", "false")) == "true",
            history=_history(params),
            max_words=self.config.recall.max_query_words,
        )

    async def search(self, _request: Request, params: Params) -> Response:
        recall = self.config.recall
        limit = params.integer("limit", recall.default_limit, 1, recall.max_limit)
        query = self._search_query(params, limit)
        with self.hub.metrics.recall.labels("search").time():
            results = await self.recall.search(query)
        return json_response(SearchAnswer(results, dropped_words(query)))

    async def context(self, _request: Request, params: Params) -> Response:
        recall = self.config.recall
        budget = params.integer(
            "budget_tokens", recall.default_budget_tokens, 1, recall.max_budget_tokens
        )
        query = self._search_query(params, recall.max_limit)
        with self.hub.metrics.recall.labels("context").time():
            answer = await self.recall.context(query, budget)
        return json_response(msgspec.structs.replace(answer, dropped_words=dropped_words(query)))

    def _page(self, params: Params, kinds: tuple[str, ...] = ()) -> Page:
        since, until = params.period()
        return Page(
            scope=params.scope(),
            kind=params.choice("kind", kinds) if kinds else None,
            after=params.cursor("after"),
            limit=params.integer("limit", PAGE_DEFAULT, 1, PAGE_MAX),
            since=since,
            until=until,
            history=_history(params),
        )

    async def facts(self, _request: Request, params: Params) -> Response:
        return json_response(await self.recall.facts(self._page(params, FACT_KINDS)))

    async def summaries(self, _request: Request, params: Params) -> Response:
        return json_response(await self.recall.summaries(self._page(params)))

    async def fact(self, request: Request, params: Params) -> Response:
        raw = request.path.removeprefix(FACTS_PREFIX)
        fact_id = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= MAX_ID_DIGITS else 0
        scope = params.scope()
        audit = await self.recall.fact(fact_id) if fact_id else None
        if audit is None or scope not in (None, audit.fact.scope):  # no hint of other scopes
            raise HttpError(404, "not_found", f"no fact with id {raw!r}")
        return json_response(audit)

    async def forget(self, request: Request, _params: Params) -> Response:
        scope = checked_key("scope", request.path.removeprefix(SCOPES_PREFIX))
        deleted = await self.hub.forget(scope)
        if self.meaning is not None:  # its vectors left with it; their codes leave the index
            self.meaning.index.forget(scope)
        return json_response(ForgetAnswer(deleted))


def _delete(prefix: str, item: str) -> Callable[[Api], Handler]:
    return lambda api: partial(edits.delete, api.hub, prefix, item)


def _pin(api: Api) -> Handler:
    return partial(edits.pin, api.store, FACTS_PREFIX)


# Every route of the API, one a row: method, path, handler, the query parameters it takes, and
# whether the memory browser (`forged ui`) may forward it. A `{name}` in a path stands for
# the item the rest of the path names; a path is matched by its first row, in this order.
ROUTES: tuple[Route[Api], ...] = (
    Route("POST", "/v1/interactions", lambda api: api.push),
    Route(
        "GET",
        "/v1/interactions",
        lambda api: partial(edits.interactions, api.store),
        edits.INTERACTIONS_PARAMS,
        browser=True,
    ),
    Route("GET", "/v1/scopes", lambda api: partial(edits.scopes, api.store), browser=True),
    Route(
        "GET",
        "/v1/edits",
        lambda api: partial(edits.edits, api.store),
        edits.EDITS_PARAMS,
        browser=True,
    ),
    Route("GET", "/v1/status", lambda api: api.status, browser=True),
    Route("GET", "/v1/health", lambda api: api.health),
    Route("GET", "/v1/metrics", lambda api: api.metrics),
    Route("POST", "/v1/index/rebuild", lambda api: api.reindex),
    Route(
        "GET", "/v1/search", lambda api: api.search, (*_SEARCH, "limit", "sources"), browser=True
    ),
    Route("GET", "/v1/context", lambda api: api.context, (*_SEARCH, "budget_tokens"), browser=True),
    Route(
        "GET",
        "/v1/facts",
        lambda api: api.facts,
        (*SCOPED, "kind", "history", *_PAGE),
        browser=True,
    ),
    Route("POST", "/v1/facts", lambda api: partial(edits.add_fact, api.store), browser=True),
    Route(
        "GET",
        "/v1/summaries",
        lambda api: api.summaries,
        (*SCOPED, "history", *_PAGE),
        browser=True,
    ),
    Route(
        "GET",
        "/v1/dead-letters",
        lambda api: partial(work.list_dead_letters, api.store),
        (*SCOPED, *work.PARAMS),
        browser=True,
    ),
    Route(
        "POST",
        "/v1/dead-letters/redistill",
        lambda api: partial(work.redistill, api.redistiller),
        work.PARAMS,
        browser=True,
    ),
    Route(
        "POST", "/v1/consolidate", lambda api: partial(work.consolidate_now, api.hub), ("scope",)
    ),
    Route("DELETE", "/v1/scopes/{scope}", lambda api: api.forget, browser=True),
    Route(
        "POST",
        "/v1/facts/{id}/correct",
        lambda api: partial(edits.correct, api.store, FACTS_PREFIX),
        edits.WITHIN,
        browser=True,
    ),
    Route("PUT", "/v1/facts/{id}/pin", _pin, edits.WITHIN, browser=True),
    Route("DELETE", "/v1/facts/{id}/pin", _pin, edits.WITHIN, browser=True),
    Route("GET", "/v1/facts/{id}", lambda api: api.fact, SCOPED, browser=True),
    Route("DELETE", "/v1/facts/{id}", _delete(FACTS_PREFIX, "fact"), edits.WITHIN, browser=True),
    Route(
        "DELETE",
        "/v1/summaries/{id}",
        _delete(SUMMARIES_PREFIX, "summary"),
        edits.WITHIN,
        browser=True,
    ),
    Route(
        "DELETE",
        "/v1/interactions/{id}",
        _delete(INTERACTIONS_PREFIX, "interaction"),
        edits.WITHIN,
        browser=True,
    ),
)
