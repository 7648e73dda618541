"""The daemon's routes as client requests: what each sends, and what its answer decodes into.

A `Call` is one request and the Struct of its answer; `decode` turns an answer into that Struct
or an error answer into a `forged.errors.ApiError` subclass, and `transport_errors` turns what
goes wrong on the way into `Unreachable`. `forged.client` sends them, blocking or async.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
import msgspec

from forged.errors import ApiError, BadRequest, ClientError, Unavailable, Unreachable
from forged.models import (
    Accepted,
    ConsolidateAnswer,
    ContextAnswer,
    Correction,
    DeadLettersAnswer,
    EditsAnswer,
    Erased,
    ErrorAnswer,
    FactAudit,
    FactKind,
    FactsPage,
    ForgetAnswer,
    Health,
    IndexStatus,
    Interaction,
    InteractionsPage,
    NewFact,
    RedistillReport,
    ScopesAnswer,
    SearchAnswer,
    Status,
    SummariesPage,
)

__all__ = [
    "HEALTH",
    "JSON",
    "NDJSON",
    "STATUS",
    "Call",
    "consolidate",
    "context",
    "dead_letters",
    "decode",
    "fact",
    "facts",
    "forget",
    "push",
    "push_body",
    "redistill",
    "search",
    "summaries",
    "transport_errors",
]

T = TypeVar("T")
JSON = "application/json"
NDJSON = "application/x-ndjson"

_ENCODE = msgspec.json.Encoder()
_ERROR = msgspec.json.Decoder(ErrorAnswer)


@dataclass(frozen=True)
class Call(Generic[T]):
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
        return http.build_request(
            self.method,
            self.path,
            params=params,
            content=self.body,
            headers=headers,
            timeout=timeout,
        )


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


def decode(call: Call[T], response: httpx.Response) -> T:
    """The answer as the Struct `call` expects; an error answer raised as an `ApiError`."""
    if response.is_error:
        raise _api_error(response)
    try:
        return msgspec.json.decode(response.content, type=call.answer)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ClientError(
            f"forged answered {call.method} {call.path} with an unexpected body: {exc}"
        ) from exc


@contextmanager
def transport_errors(socket: str) -> Iterator[None]:
    """Translate what can go wrong on the way to the daemon, once, into `Unreachable` (or a
    `ClientError` for a request too long to send)."""
    try:
        yield
    except httpx.InvalidURL as exc:  # not an HTTPError: a query far over the daemon's head limit
        raise ClientError(f"the request is too long to send ({exc}): shorten the query") from exc
    except (httpx.ConnectError, FileNotFoundError, ConnectionRefusedError) as exc:
        raise Unreachable(
            f"cannot reach forged at {socket} ({exc}); is the daemon running?"
        ) from exc
    except httpx.TimeoutException as exc:
        raise Unreachable(f"forged at {socket} did not answer in time ({exc!r})") from exc
    except httpx.HTTPError as exc:
        raise Unreachable(f"talking to forged at {socket} failed: {exc}") from exc


def push(interactions: Interaction | Iterable[Interaction]) -> Call[Accepted]:
    if isinstance(interactions, Interaction):
        return push_body(_ENCODE.encode(interactions))
    return push_body(_ENCODE.encode(list(interactions)))


def push_body(body: bytes, content_type: str = JSON) -> Call[Accepted]:
    return Call("POST", "/v1/interactions", Accepted, body=body, content_type=content_type)


def search(q: str, **params: Any) -> Call[SearchAnswer]:
    return Call("GET", "/v1/search", SearchAnswer, {"q": q, **params})


def context(q: str, **params: Any) -> Call[ContextAnswer]:
    return Call("GET", "/v1/context", ContextAnswer, {"q": q, **params})


def _scoped(scope: str | None, all_scopes: bool) -> dict[str, Any]:
    """The scope rule of listings: a scope named, "default" without one, or every scope asked
    for by name (`all_scopes=true`)."""
    return {"scope": scope, "all_scopes": "true" if all_scopes else None}


def facts(
    *, history: bool = False, scope: str | None = None, all_scopes: bool = False, **params: Any
) -> Call[FactsPage]:
    """`history`: superseded facts too."""
    return Call(
        "GET",
        "/v1/facts",
        FactsPage,
        {**params, **_scoped(scope, all_scopes), "history": "true" if history else None},
    )


def fact(fact_id: int, *, scope: str | None = None, all_scopes: bool = False) -> Call[FactAudit]:
    return Call("GET", f"/v1/facts/{fact_id}", FactAudit, _scoped(scope, all_scopes))


def consolidate(scope: str | None) -> Call[ConsolidateAnswer]:
    return Call("POST", "/v1/consolidate", ConsolidateAnswer, {"scope": scope}, slow=True)


def summaries(
    *, scope: str | None = None, all_scopes: bool = False, **params: Any
) -> Call[SummariesPage]:
    return Call("GET", "/v1/summaries", SummariesPage, {**params, **_scoped(scope, all_scopes)})


def interactions(scope: str | None = None, **params: Any) -> Call[InteractionsPage]:
    """A scope's interactions by time (`since`, `until`, `after`, `limit`)."""
    return Call("GET", "/v1/interactions", InteractionsPage, {"scope": scope, **params})


SCOPES = Call("GET", "/v1/scopes", ScopesAnswer)
ITEM_PATHS = {"fact": "/v1/facts/", "summary": "/v1/summaries/", "interaction": "/v1/interactions/"}


def delete(
    item: str, item_id: int, *, scope: str | None = None, all_scopes: bool = False
) -> Call[Erased]:
    """Erase one `fact`, `summary` or `interaction` (by its seq) of the scope the rule names."""
    path = f"{ITEM_PATHS[item]}{int(item_id)}"
    return Call("DELETE", path, Erased, _scoped(scope, all_scopes))


def correct(
    fact_id: int,
    text: str,
    kind: FactKind | None = None,
    *,
    scope: str | None = None,
    all_scopes: bool = False,
    at: str | None = None,
) -> Call[FactAudit]:
    body = _ENCODE.encode(Correction(text, kind, at))
    path = f"/v1/facts/{int(fact_id)}/correct"
    return Call("POST", path, FactAudit, _scoped(scope, all_scopes), body=body)


def add_fact(fact: NewFact) -> Call[FactAudit]:
    return Call("POST", "/v1/facts", FactAudit, body=_ENCODE.encode(fact))


def pin(
    fact_id: int, pinned: bool = True, *, scope: str | None = None, all_scopes: bool = False
) -> Call[FactAudit]:
    path = f"/v1/facts/{int(fact_id)}/pin"
    return Call("PUT" if pinned else "DELETE", path, FactAudit, _scoped(scope, all_scopes))


def edits(
    *, scope: str | None = None, all_scopes: bool = False, limit: int | None = None
) -> Call[EditsAnswer]:
    return Call("GET", "/v1/edits", EditsAnswer, {**_scoped(scope, all_scopes), "limit": limit})


def forget(scope: str) -> Call[ForgetAnswer]:
    return Call("DELETE", "/v1/scopes/" + quote(scope, safe=""), ForgetAnswer)


def _seq_range(first: int | None, last: int | None) -> dict[str, Any]:
    return {"from": first, "to": last}


STATUS = Call("GET", "/v1/status", Status)
REINDEX = Call("POST", "/v1/index/rebuild", IndexStatus)
HEALTH = Call("GET", "/v1/health", Health)


def dead_letters(
    first: int | None, last: int | None, *, scope: str | None = None, all_scopes: bool = False
) -> Call[DeadLettersAnswer]:
    params = {**_seq_range(first, last), **_scoped(scope, all_scopes)}
    return Call("GET", "/v1/dead-letters", DeadLettersAnswer, params)


def redistill(first: int | None, last: int | None) -> Call[RedistillReport]:
    params = _seq_range(first, last)
    return Call("POST", "/v1/dead-letters/redistill", RedistillReport, params, slow=True)
