"""The routes that show and edit memory item by item: the scopes, a scope's interactions by
time, the edit trail; delete an interaction, summary or fact, correct, add or pin a fact.

Each handler is bound to what it uses by `forged.http.routes`; a body is JSON, decoded into the Structs
of forged.models, and every text a user writes is scrubbed before it is stored. Every route
follows the one scope rule (`Params.scope`): an item of a scope other than the one named (or
`default`) is missing, unless the request asks for `all_scopes=true`.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec
import trio

from forged.http.connection import HttpError, Request, Response
from forged.http.params import SCOPED, Params
from forged.hub import Hub
from forged.models import (
    DEFAULT_SCOPE,
    Correction,
    EditsAnswer,
    NewFact,
    ScopesAnswer,
)
from forged.recall import listing
from forged.recall.listing import EDITS_MAX, PAGE_DEFAULT, PAGE_MAX, InteractionPage
from forged.scrub.scan import scrub
from forged.store.backend import Backend
from forged.timestamps import now, utc_timestamp

__all__ = [
    "EDITS_PARAMS",
    "INTERACTIONS_PARAMS",
    "MAX_ID_DIGITS",
    "WITHIN",
    "add_fact",
    "correct",
    "decode_body",
    "delete",
    "edits",
    "interactions",
    "item_id",
    "json_response",
    "pin",
    "scopes",
]

T = TypeVar("T")
INTERACTIONS_PARAMS = ("scope", "since", "until", "after", "limit")
EDITS_PARAMS = (*SCOPED, "limit")
WITHIN = SCOPED  # an edit's only parameters: the item must be of the scope the rule names
MAX_ID_DIGITS = 18  # an id in a path: at most this many digits, so it fits SQLite's integer
_CURSOR = re.compile(r"(\d{1,18})@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")  # `next` of a page
_JSON = msgspec.json.Encoder()


def json_response(value: Any, status: int = 200) -> Response:
    return Response(status, _JSON.encode(value))


def item_id(request: Request, prefix: str, suffix: str = "", what: str = "fact") -> int:
    """The id in `{prefix}{id}{suffix}`; a 404 naming it when it is no id at all."""
    raw = request.path.removeprefix(prefix).removesuffix(suffix)
    if raw.isascii() and raw.isdigit() and len(raw) <= MAX_ID_DIGITS and int(raw) > 0:
        return int(raw)
    raise HttpError(404, "not_found", f"no {what} with id {raw!r}")


def decode_body(request: Request, kind: type[T]) -> T:
    """The JSON body as `kind`; a 400 naming the field and the problem otherwise."""
    if not request.body.strip():
        raise HttpError(400, "invalid_body", "the body is empty; send a JSON object")
    try:
        return msgspec.json.decode(request.body, type=kind)
    except msgspec.ValidationError as exc:
        raise HttpError(400, "invalid_body", str(exc)) from None
    except msgspec.DecodeError as exc:
        raise HttpError(400, "invalid_body", f"the body is not JSON: {exc}") from None


def _moment(at: str | None) -> str | None:
    """`at` of a new fact in forged's format; never later than now (it would win recency)."""
    if at is None:
        return None
    try:
        moment = utc_timestamp(at)
    except ValueError as exc:
        raise HttpError(400, "invalid_body", f"at: {at!r} {exc}") from None
    if moment > now():
        raise HttpError(400, "invalid_body", f"at: {at!r} is in the future")
    return moment


async def _scrubbed(text: str) -> str:
    text = await trio.to_thread.run_sync(scrub, text)  # CPU work on untrusted text
    if not text.strip():
        raise HttpError(400, "invalid_body", "`text` must not be blank")
    return text


async def scopes(store: Backend, _request: Request, _params: Params) -> Response:
    return json_response(ScopesAnswer(await store.read(listing.list_scopes)))


def _interaction_page(params: Params) -> InteractionPage:
    since, until = params.period()
    after_seq, after_at = 0, ""
    if (raw := params.query.get("after")) is not None:
        if (m := _CURSOR.fullmatch(raw)) is None:
            raise HttpError(
                400,
                "invalid_parameter",
                f"`after` must be the `next` cursor of a previous page; got {raw!r}",
            )
        after_seq, after_at = int(m[1]), m[2]
    return InteractionPage(
        scope=params.key("scope", DEFAULT_SCOPE) or DEFAULT_SCOPE,
        after_at=after_at,
        after_seq=after_seq,
        limit=params.integer("limit", PAGE_DEFAULT, 1, PAGE_MAX),
        since=since,
        until=until,
    )


async def interactions(store: Backend, _request: Request, params: Params) -> Response:
    page = _interaction_page(params)
    return json_response(await store.read(listing.list_interactions, page))


async def edits(store: Backend, _request: Request, params: Params) -> Response:
    scope, limit = params.scope(), params.integer("limit", PAGE_DEFAULT, 1, EDITS_MAX)
    return json_response(EditsAnswer(await store.read(listing.list_edits, scope, limit)))


async def delete(hub: Hub, prefix: str, item: str, request: Request, params: Params) -> Response:
    erased = await hub.delete(item, item_id(request, prefix, what=item), params.scope())
    return json_response(erased)


async def add_fact(store: Backend, request: Request, _params: Params) -> Response:
    new = decode_body(request, NewFact)
    at = _moment(new.at)
    new = msgspec.structs.replace(new, text=await _scrubbed(new.text))
    return json_response(await store.add_fact(new, at), 201)


async def correct(store: Backend, prefix: str, request: Request, params: Params) -> Response:
    fact_id, within = item_id(request, prefix, "/correct"), params.scope()
    correction = decode_body(request, Correction)
    at = _moment(correction.at)
    correction = msgspec.structs.replace(correction, text=await _scrubbed(correction.text), at=at)
    return json_response(await store.correct_fact(fact_id, correction, within), 201)


async def pin(store: Backend, prefix: str, request: Request, params: Params) -> Response:
    """PUT pins the fact, DELETE unpins it; both answer the fact with its audit trail (read in
    the edit's transaction: forged.store.audit)."""
    fact_id = item_id(request, prefix, "/pin")
    return json_response(await store.pin_fact(fact_id, request.method == "PUT", params.scope()))
