"""Dead letters: the interactions the distiller gave up on, listed and re-run on request."""

from __future__ import annotations

import msgspec
import structlog
import trio

from forged.distill.batches import RERUN, UNWATCHED, BatchDistiller, Distilled, new_batch_id
from forged.errors import InvalidRequest, LLMUnavailable
from forged.http.connection import Request, Response
from forged.http.params import MAX_SEQ, Params
from forged.models import DISTILL_OBSERVER, DeadLettersAnswer, RedistillReport, RedistillResult
from forged.observing.hub import Progress
from forged.store.backend import Backend
from forged.store.records import BatchOutcome

PARAMS = ("from", "to")  # the seq range both routes take
LLM_RETRY_AFTER = 10  # seconds a client is told to wait when the LLM is unreachable
_JSON = msgspec.json.Encoder()

log = structlog.get_logger("forged.deadletters")


class Redistiller:
    """Distils open dead letters again, each alone, and commits what works.

    It gets the store to read the letters, the work (which raises at once when the LLM is
    unreachable) and the distill observer's progress to commit through.
    """

    def __init__(self, store: Backend, work: BatchDistiller, progress: Progress) -> None:
        self._store = store
        self._work = work
        self._progress = progress
        self._running = trio.Lock()  # one re-run at a time: never two results for a seq

    async def redistill(self, first_seq: int, last_seq: int) -> RedistillReport:
        """Re-run the open dead letters in the seq range; results and resolved letters commit
        in one transaction, the watermark stays. Raises `LLMUnavailable`, committing nothing."""
        async with self._running:
            letters = await self._store.open_dead_letters(DISTILL_OBSERVER, first_seq, last_seq)
            out, batch_id = Distilled(), new_batch_id()
            results: list[RedistillResult] = []
            resolved: list[int] = []
            for letter in letters:
                item, done = letter.interaction, Distilled()
                await self._work.distill_group(batch_id, item.scope, [item], done, UNWATCHED, RERUN)
                out.runs += done.runs
                if done.failed:  # it stays open as it was; no second letter
                    reason = done.failed[0].reason
                    results.append(RedistillResult(item.seq, letter.id, "still_failing", 0, reason))
                    continue
                out.results += done.results
                resolved.append(letter.id)
                facts = len(done.results[0].facts)
                results.append(RedistillResult(item.seq, letter.id, "redistilled", facts))
            if letters:
                await self._progress.commit_batch(
                    BatchOutcome(out.results, [], out.runs, None, resolved)
                )
        report = RedistillReport(len(resolved), len(results) - len(resolved), results)
        log.info(
            "redistilled",
            observer=DISTILL_OBSERVER,
            redistilled=report.redistilled,
            still_failing=report.still_failing,
        )
        return report


def _range(params: Params) -> tuple[int, int]:
    first = params.integer("from", 0, 0, MAX_SEQ)
    last = params.integer("to", MAX_SEQ, 0, MAX_SEQ)
    if first > last:
        raise InvalidRequest(
            400, "invalid_parameter", f"`from` ({first}) is greater than `to` ({last})"
        )
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
        raise InvalidRequest(409, "distill_disabled", "the distill observer is not running")
    try:
        report = await redistiller.redistill(first, last)
    except LLMUnavailable as exc:
        raise InvalidRequest(
            503,
            "llm_unavailable",
            f"the LLM cannot be reached ({exc}); nothing was changed, retry later",
            retry_after=LLM_RETRY_AFTER,
        ) from exc
    return Response(200, _JSON.encode(report))
