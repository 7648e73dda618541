"""The dead-letter routes: list the interactions the distiller gave up on, and re-run them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from forged.errors import InvalidRequest, LLMUnavailable
from forged.httpserver import Request, Response
from forged.models import DeadLettersAnswer
from forged.params import MAX_SEQ, Params

if TYPE_CHECKING:
    from forged.distill import DistillObserver
    from forged.hub import Hub, Progress

PARAMS = ("from", "to")  # the seq range both routes take
OBSERVER = "distill"  # the observer that writes dead letters
LLM_RETRY_AFTER = 10  # seconds a client is told to wait when the LLM is unreachable
_JSON = msgspec.json.Encoder()


def _range(params: Params) -> tuple[int, int]:
    first = params.integer("from", 0, 0, MAX_SEQ)
    last = params.integer("to", MAX_SEQ, 0, MAX_SEQ)
    if first > last:
        raise InvalidRequest(
            400, "invalid_parameter", f"`from` ({first}) is greater than `to` ({last})"
        )
    return first, last


def _distill(hub: Hub) -> tuple[DistillObserver, Progress]:
    from forged.distill import DistillObserver  # not at import time: distill imports the hub

    observer = hub.observer(OBSERVER)
    if not isinstance(observer, DistillObserver) or OBSERVER not in hub.progress:
        raise InvalidRequest(409, "distill_disabled", "the distill observer is not running")
    return observer, hub.progress[OBSERVER]


async def list_dead_letters(hub: Hub, _request: Request, params: Params) -> Response:
    """`GET /v1/dead-letters?from=&to=`: the open dead letters, oldest seq first."""
    first, last = _range(params)
    letters = await hub.store.list_dead_letters(OBSERVER, first, last)
    return Response(200, _JSON.encode(DeadLettersAnswer(letters)))


async def redistill(hub: Hub, _request: Request, params: Params) -> Response:
    """`POST /v1/dead-letters/redistill?from=&to=`: distil the open dead letters again."""
    first, last = _range(params)
    observer, progress = _distill(hub)
    try:
        report = await observer.redistill(progress, first, last)
    except LLMUnavailable as exc:
        raise InvalidRequest(
            503,
            "llm_unavailable",
            f"the LLM cannot be reached ({exc}); nothing was changed, retry later",
            retry_after=LLM_RETRY_AFTER,
        ) from exc
    return Response(200, _JSON.encode(report))
