"""The keeper of the turn index: follows the log from the index's own watermark, commits what
it read with the new watermark, takes out what was forgotten, and rewrites the index from the
store when it is missing, stale or holds the words of erased turns.

The keeper observes the log like the hub's observers, a chunk at a time and batched by what has
piled up, but its progress lives only in the index: a derived index never holds back ingest
(no `backlog_full` on its account), and every daemon on a shared PostgreSQL keeps one of its
own, fed from the shared log; during an ingest burst it holds back (bounded), taking no CPU
from ingest, and catches up after. Recall reads the index once it lags the log by at most
MAX_TAIL turns, and scores those from the store; further behind, the store's own full-text
search answers.
"""

from __future__ import annotations

import contextlib
import math
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, TypeVar

import structlog
import trio

from forged.backoff import Backoff
from forged.index.turns import IndexView, TurnIndex, TurnText
from forged.models import IndexStatus, StoredInteraction, speaker_lines
from forged.store.backend import Backend
from forged.store.cjk import cjk_grams
from forged.timestamps import julian_day

__all__ = ["CHUNK", "MAX_TAIL", "IndexKeeper", "IndexState", "turn_text"]

CHUNK = 2_000  # turns read from the log, indexed and committed at a time
# Once caught up, the keeper lets turns pile up while they keep coming (each commit writes a
# segment and syncs it: one per push would take the cores and the disk from ingest), until
# none came for QUIET seconds, BATCH_TURNS wait or BATCH_WAIT passed; recall scores those from
# the store meanwhile. During a burst (ingest had a push in flight within EASED seconds) it
# holds back instead, HOLD seconds at most: indexing costs CPU that ingest then lacks, and past
# MAX_TAIL turns behind, the store's own index answers searches until the keeper catches up.
# EASED is longer than QUIET: on busy cores a client's next request may lag an answer more.
QUIET = 0.02
BATCH_TURNS = 500
BATCH_WAIT = 0.5
EASED = 0.1
HOLD = 5.0
SETTLE_AFTER = 10 * CHUNK  # turns indexed in a row after which the keeper waits for merges
MAX_TAIL = 1_000  # turns the index may lag by and still be read: recall scores them itself
SHARED_COUNT_EVERY = 10.0  # seconds between counts of a shared log: erased elsewhere?
RETRY_INITIAL = 1.0  # seconds before a failed index is opened again, doubling...
RETRY_MAX = 300.0  # ...up to this
log = structlog.get_logger(__name__)

IndexState = Literal["opening", "catching_up", "ready", "rewriting", "failed"]
T = TypeVar("T")


def turn_text(item: StoredInteraction) -> TurnText:
    """What the index holds of a stored turn: the "speaker: text" lines the store indexes, CJK
    runs written as their characters and pairs (forged.store.cjk)."""
    text = cjk_grams(speaker_lines(item.messages))
    try:
        at = julian_day(item.timestamp)
    except ValueError:  # forged writes none such; an unreadable time decays to the floor
        at = 0.0
    return TurnText(item.seq, item.scope, at, text, item.session)


def _added(index: TurnIndex, rows: Sequence[StoredInteraction]) -> None:
    """Index rows read from the log and commit them with the last one's seq."""
    index.add(turn_text(row) for row in rows)
    index.commit(rows[-1].seq)


def _erased(index: TurnIndex, scopes: list[str], seqs: list[int]) -> None:
    for scope in scopes:
        index.forget(scope)
    index.delete(seqs)
    index.commit(index.watermark)


async def _either(first: trio.Event, second: trio.Event) -> None:
    """Return once either event is set."""
    async with trio.open_nursery() as nursery:
        for event in (first, second):

            async def wait(event: trio.Event = event) -> None:
                await event.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait)


def _swap(new: Path, path: Path) -> None:
    """Put the rewritten index in place of the old one, which is deleted with its files."""
    old = path.with_name(path.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        path.rename(old)
    new.rename(path)
    shutil.rmtree(old, ignore_errors=True)


class IndexKeeper:
    """The index of one daemon and the task that keeps it."""

    def __init__(
        self, store: Backend, path: Path, idle_for: Callable[[], float] = lambda: math.inf
    ) -> None:
        self.store = store
        self.path = path
        self._idle_for = idle_for  # seconds since ingest last had a push in flight
        self.index: TurnIndex | None = None
        self.state: IndexState = "opening"
        self.error: str | None = None
        self._limiter = trio.CapacityLimiter(1)  # the index has one writer: this task
        self._moved = trio.Event()  # set at each commit and state change
        self._wake = trio.Event()  # set when there is something to erase
        self._forgotten: list[str] = []
        self._deleted: list[int] = []
        self._rewrite = False  # erased turns' words are still in the index's files
        self._counted = -math.inf  # when the shared log's rows were last counted
        self._unsettled = 0  # turns indexed since the index's merges were last waited for

    @property
    def watermark(self) -> int:
        return self.index.watermark if self.index is not None else 0

    def status(self) -> IndexStatus:
        last = self.store.last_seq
        return IndexStatus(self.state, self.watermark, max(0, last - self.watermark), self.error)

    def _moved_on(self) -> None:
        self._moved.set()
        self._moved = trio.Event()

    def usable(self, last_seq: int) -> IndexView | None:
        """The index's last commit, if recall may read it with the log up to `last_seq`: it
        lags by at most MAX_TAIL turns, which recall scores from the store
        (forged.recall.indexed)."""
        view = None if self.index is None else self.index.view
        if view is None or last_seq - view.watermark > MAX_TAIL:
            return None
        return view

    async def moved(self) -> None:
        """Return at the keeper's next commit or change of state."""
        await self._moved.wait()

    @property
    def settled(self) -> bool:
        """The index holds the whole log and nothing waits to be erased from its files."""
        pending = self._forgotten or self._deleted or self._rewrite
        return not pending and self.state == "ready" and self.watermark >= self.store.last_seq

    async def wait_settled(self) -> None:
        """Return once the index is `settled`: what was erased is gone from its files."""
        while not self.settled:
            await self._moved.wait()

    def forget(self, scope: str) -> None:
        """Erase a scope's turns from the index, in searches at once and then from its files."""
        self._forgotten.append(scope)
        self._wake.set()

    def delete(self, seq: int) -> None:
        """Erase one turn from the index, as `forget`."""
        self._deleted.append(seq)
        self._wake.set()

    def rebuild(self) -> None:
        """Rewrite the index from the store (`forged reindex`)."""
        self._rewrite = True
        self._wake.set()

    async def serve(
        self,
        appended: Callable[[], trio.Event],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Open the index, then keep it: catch up with the log, erase, rewrite. `appended`
        gives the event the next append to the log sets.

        Ready at once: until the index is open and close behind the log, the store's own index
        answers. A failure (a directory that cannot be written, a full disk, a damaged file)
        never takes the daemon down: it is logged, shown by the status, and tried again later.
        """
        task_status.started()
        backoff = Backoff(RETRY_INITIAL, RETRY_MAX)
        while True:
            try:
                await self._open()
                await self._keep(appended, backoff)
            except Exception as exc:  # a derived index must never stop the daemon
                log.exception("index_failed", path=str(self.path), retry_in=backoff.initial)
                self.error = f"{type(exc).__name__}: {exc}"
                await self._close()
                self._set("failed")
            finally:
                with trio.CancelScope(shield=True):
                    await self._close()
            await trio.sleep(backoff.next())

    async def _open(self) -> None:
        """Open the index; one of another store, or of this one before, starts again empty."""
        self._set("opening")
        index = await self._in_thread(TurnIndex, self.path)
        if index.watermark > self.store.last_seq:
            log.warning("index_stale", watermark=index.watermark, last_seq=self.store.last_seq)
            await self._in_thread(index.close)
            await self._in_thread(shutil.rmtree, self.path)
            index = await self._in_thread(TurnIndex, self.path)
        self.index = index

    async def _keep(self, appended: Callable[[], trio.Event], backoff: Backoff) -> None:
        while True:
            woken = appended()
            if self._forgotten or self._deleted:
                await self._erase()
            if self._rewrite:
                await self._rewritten()
            elif not await self._caught_up(appended) or await self._erased_elsewhere():
                continue
            self.error = None
            backoff.reset()
            self._set("ready")
            with trio.move_on_after(self.store.poll_interval):
                await _either(woken, self._wake)
            self._wake = trio.Event()

    async def _close(self) -> None:
        """Let go of the index (searches fall back to the store's index meanwhile)."""
        index, self.index = self.index, None
        if index is not None:
            with contextlib.suppress(Exception):  # closing a failed index may fail too
                await self._in_thread(index.close)

    def _set(self, state: IndexState) -> None:
        self.state = state
        self._moved_on()

    async def _caught_up(self, appended: Callable[[], trio.Event]) -> bool:
        """Index the next chunk of the log, once a batch piled up and no burst is on (HOLD
        seconds at most, caught up or not); whether there was none (then, after a long
        catch-up, the index's merges are waited for)."""
        assert self.index is not None
        with trio.move_on_after(HOLD):
            if self.state == "ready":
                await self._piled_up(appended)
            await self._burst_eased()
        rows = await self.store.read_log(self.index.watermark, CHUNK)
        if not rows:
            if self._unsettled >= SETTLE_AFTER:
                await self._in_thread(self.index.settle)
            self._unsettled = 0
            return True
        if self.state != "ready":
            self._set("catching_up")
        await self._in_thread(_added, self.index, rows)
        self._unsettled += len(rows)
        self._moved_on()
        return False

    async def _piled_up(self, appended: Callable[[], trio.Event]) -> None:
        """Return once no turn came for QUIET seconds, BATCH_TURNS wait to be indexed, or
        BATCH_WAIT passed."""
        assert self.index is not None
        with trio.move_on_after(BATCH_WAIT):
            while self.store.last_seq - self.index.watermark < BATCH_TURNS:
                with trio.move_on_after(QUIET) as quiet:
                    await appended().wait()
                if quiet.cancelled_caught:
                    return

    async def _burst_eased(self) -> None:
        """Return once ingest has had no push in flight for EASED seconds."""
        # A deadline, not an event: ingest tells no one when it has been idle that long.
        while (idle := self._idle_for()) < EASED:  # noqa: ASYNC110
            await trio.sleep(EASED - idle)

    async def _erased_elsewhere(self) -> bool:
        """Whether the index holds turns the log no longer has: another daemon on the shared
        store forgot or deleted them. The index is then rewritten, so that they leave its
        files too (searches never showed them: every candidate is read from the store)."""
        assert self.index is not None
        if self.store.backend == "postgresql":
            if trio.current_time() < self._counted + SHARED_COUNT_EVERY:
                return False  # counting a shared log's rows costs a pass over its index
            self._counted = trio.current_time()
            await self.store.refresh_totals()  # its count as the shared table has it
        if self.index.watermark < self.store.last_seq:
            return False  # not caught up: the counts do not compare
        held = (await self._in_thread(self.index.view.stats)).turns
        if held <= self.store.count:
            return False
        log.info("index_holds_erased_turns", turns=held, log_count=self.store.count)
        self._rewrite = True
        return True

    async def _erase(self) -> None:
        """Take forgotten scopes and deleted turns out of searches, in one commit; their
        words stay in the files until the next rewrite, which follows at once."""
        assert self.index is not None
        scopes, self._forgotten = self._forgotten, []
        seqs, self._deleted = self._deleted, []
        self._rewrite = True  # before the wait: the index is not settled until rewritten
        await self._in_thread(_erased, self.index, scopes, seqs)
        log.info("index_erased", scopes=len(scopes), turns=len(seqs))

    async def _rewritten(self) -> None:
        """Write a new index from the store beside the old one, then put it in its place."""
        self._set("rewriting")
        self._rewrite = False
        new = self.path.with_name(self.path.name + ".new")
        await self._in_thread(shutil.rmtree, new, True)
        fresh = await self._in_thread(TurnIndex, new)
        started = trio.current_time()
        while rows := await self.store.read_log(fresh.watermark, CHUNK):
            await self._in_thread(_added, fresh, rows)
        await self._in_thread(fresh.close)
        assert self.index is not None
        await self._in_thread(self.index.close)
        await self._in_thread(_swap, new, self.path)
        self.index = await self._in_thread(TurnIndex, self.path)
        log.info(
            "index_rewritten",
            watermark=self.index.watermark,
            seconds=round(trio.current_time() - started, 3),
        )

    async def _in_thread(self, fn: Callable[..., T], *args: object) -> T:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)
