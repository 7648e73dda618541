"""The routes that put observers to work on request: dead letters listed and distilled again,
and consolidation run now; what the work raises becomes its HTTP answer here."""

from __future__ import annotations

import msgspec

from forged.consolidate.observer import NAME, ConsolidateObserver
from forged.distill.deadletters import Redistiller
from forged.errors import BudgetSpent, LLMUnavailable
from forged.http.connection import HttpError, Request, Response
from forged.http.params import MAX_SEQ, Params
from forged.hub import Hub
from forged.models import DISTILL_OBSERVER, ConsolidateAnswer, DeadLettersAnswer
from forged.store.backend import Backend

__all__ = ["LLM_RETRY_AFTER", "PARAMS", "consolidate_now", "list_dead_letters", "redistill"]

PARAMS = ("from", "to")  # the seq range both dead-letter routes take
LLM_RETRY_AFTER = 10  # seconds a client is told to wait when the LLM is unreachable
_JSON = msgspec.json.Encoder()


def _range(params: Params) -> tuple[int, int]:
    first = params.integer("from", 0, 0, MAX_SEQ)
    last = params.integer("to", MAX_SEQ, 0, MAX_SEQ)
    if first > last:
        raise HttpError(400, "invalid_parameter", f"`from` ({first}) is greater than `to` ({last})")
    return first, last


async def list_dead_letters(store: Backend, _request: Request, params: Params) -> Response:
    """`GET /v1/dead-letters?scope=&from=&to=`: the open dead letters, oldest seq first."""
    first, last = _range(params)
    scope = params.scope()
    letters = [
        letter
        for letter in await store.list_dead_letters(DISTILL_OBSERVER, first, last)
        if scope in (None, letter.scope)
    ]
    return Response(200, _JSON.encode(DeadLettersAnswer(letters)))


async def redistill(redistiller: Redistiller | None, _request: Request, params: Params) -> Response:
    """`POST /v1/dead-letters/redistill?from=&to=`: distil the open dead letters again."""
    first, last = _range(params)
    if redistiller is None:
        raise HttpError(409, "distill_disabled", "the distill observer is not running")
    try:
        report = await redistiller.redistill(first, last)
    except LLMUnavailable as exc:
        raise HttpError(
            503,
            "llm_unavailable",
            f"the LLM cannot be reached ({exc}); nothing was changed, retry later",
            retry_after=LLM_RETRY_AFTER,
        ) from exc
    return Response(200, _JSON.encode(report))


async def consolidate_now(hub: Hub, _request: Request, params: Params) -> Response:
    """`POST /v1/consolidate?scope=`: consolidate one scope, or every scope with new facts."""
    observer = hub.observer(NAME)
    if not isinstance(observer, ConsolidateObserver) or NAME not in hub.progress:
        raise HttpError(
            409,
            "consolidate_disabled",
            "the consolidate observer is not running; set [consolidate] enabled = true",
        )
    scope = params.key("scope")
    scopes = [scope] if scope is not None else await observer.due()
    runs = []
    try:
        for s in scopes:
            runs.append(await observer.consolidate(s, hub.progress[NAME], patient=False))
    except LLMUnavailable as exc:
        raise HttpError(
            503,
            "llm_unavailable",
            f"the LLM cannot be reached ({exc}); the scope in hand was left as it was, retry later",
            retry_after=LLM_RETRY_AFTER,
        ) from exc
    except BudgetSpent as exc:
        raise HttpError(
            429,
            "budget_spent",
            f"{exc}; the scope in hand was left as it was",
            retry_after=int(exc.retry_after) + 1,
        ) from exc
    return Response(200, _JSON.encode(ConsolidateAnswer(runs)))
