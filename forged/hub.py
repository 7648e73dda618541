"""The observer hub: each observer gets its own bounded channel fed from the log at its
watermark, and is restarted when it fails."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar

import structlog
import trio

from forged.backoff import Backoff
from forged.errors import ObserverError, StorageFull, leaves
from forged.metrics import Metrics
from forged.models import (
    MAX_TOTAL,
    BatchInFlight,
    Deleted,
    Erased,
    ObserverState,
    ObserverStatus,
    StoredInteraction,
)
from forged.store.backend import Backend
from forged.store.records import BatchOutcome
from forged.timestamps import now

__all__ = [
    "FEED_CHUNK",
    "HEALTHY_RUN",
    "RESTART_INITIAL",
    "RESTART_MAX",
    "STORAGE_RETRY_INITIAL",
    "STORAGE_RETRY_MAX",
    "Batcher",
    "Feed",
    "Hub",
    "Observer",
    "Progress",
    "Queue",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
RESTART_INITIAL = 0.5  # seconds before restarting an observer that raised
RESTART_MAX = 30.0  # longest wait between restarts
HEALTHY_RUN = 60.0  # seconds an observer must run before its restart delay resets
FEED_CHUNK = 256  # log rows a feeder reads per query
# Characters of messages an observer's queue holds at most (its first turn whatever its size):
# with a model down, a queue of 256 turns of 12 MB each held 3 GB.
FEED_CHARS = 64 * 1024 * 1024
STORAGE_RETRY_INITIAL = 0.1  # seconds before retrying a commit that found the disk full
STORAGE_RETRY_MAX = 5.0  # longest wait between such retries

log = structlog.get_logger(__name__)


class Queue(Protocol[T_co]):
    """What batched draining takes items from: a trio memory channel or an observer's `Feed`."""

    async def receive(self) -> T_co: ...

    def receive_nowait(self) -> T_co: ...


class Batcher(Generic[T]):
    """Batched draining: wait for one item, then take what is already queued, up to the limits.

    An item that would overflow `max_weight` is kept for the next batch, if `keep` still wants
    it then; a single item heavier than the limit forms a batch of its own.
    """

    def __init__(
        self,
        receive: Queue[T],
        *,
        max_items: int,
        max_weight: int | None = None,
        weight: Callable[[T], int] = lambda _: 1,
        keep: Callable[[T], bool] = lambda _: True,
    ) -> None:
        self._receive = receive
        self._max_items = max_items
        self._max_weight = max_weight
        self._weight = weight
        self._keep = keep
        self._carry: list[T] = []

    async def next(self) -> list[T]:
        """The next batch; raises `trio.EndOfChannel` once the channel is closed and empty."""
        carried = [item for item in self._carry if self._keep(item)]
        self._carry.clear()
        batch = carried or [await self._receive.receive()]
        total = self._weight(batch[0])
        while len(batch) < self._max_items:
            try:
                item = self._receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
            total += self._weight(item)
            if self._max_weight is not None and total > self._max_weight:
                self._carry.append(item)
                break
            batch.append(item)
        return batch


class Feed(trio.abc.ReceiveChannel[StoredInteraction]):
    """An observer's bounded queue of interactions, filled from the log by the hub.

    Forgetting a scope takes back what is queued: an interaction of a scope forgotten after it
    was read from the log is skipped, so no observer sees it once the forget has answered. The
    watermark moves over skipped interactions once everything handed out before is committed.
    """

    def __init__(
        self, receive: trio.MemoryReceiveChannel[StoredInteraction], progress: Progress
    ) -> None:
        self._receive = receive
        self._progress = progress
        self._forgotten: dict[str, int] = {}  # scope -> last erased seq, while one may be queued
        self._erased: set[int] = set()  # seqs deleted one by one, while one may be queued
        self._handed = 0  # the last seq handed to the observer
        self._skipped = 0  # the last seq skipped
        self.sent = 0  # the last seq the hub put into the queue
        self._queued_chars = 0  # of the messages in the queue
        self._taken = trio.Event()  # set when an item leaves the queue

    def forget(self, scope: str, through: int) -> None:
        """Skip the scope's interactions with seq up to `through` from now on."""
        done = self._progress.status.watermark  # nothing at or below it is still queued
        self._forgotten = {s: t for s, t in self._forgotten.items() if t > done}
        if through > done:
            self._forgotten[scope] = through

    def erase(self, seq: int) -> None:
        """Skip the interaction `seq` from now on: it was deleted on its own."""
        done = self._progress.status.watermark
        self._erased = {s for s in self._erased if s > done}
        if seq > done:
            self._erased.add(seq)

    def wanted(self, item: StoredInteraction) -> bool:
        """Whether the item is still in the log: neither its scope nor itself was erased since
        it was read."""
        return item.seq > self._forgotten.get(item.scope, 0) and item.seq not in self._erased

    def queued(self, item: StoredInteraction) -> None:
        """Count an item the hub put into the queue."""
        self._queued_chars += _chars(item)
        self.sent = item.seq

    async def room(self) -> None:
        """Return once the queue holds fewer than FEED_CHARS characters of messages."""
        while self._queued_chars >= FEED_CHARS:
            await self._taken.wait()

    def _take(self, item: StoredInteraction) -> bool:
        self._queued_chars -= _chars(item)
        self._taken.set()
        self._taken = trio.Event()
        if self.wanted(item):
            self._handed = item.seq
            return True
        self._skipped = max(self._skipped, item.seq)  # `passed` may have gone further
        return False

    async def _commit_skipped(self) -> None:
        """Move the watermark over skipped seqs once nothing handed out or queued is before them."""
        idle = self._receive.statistics().current_buffer_used == 0
        if idle and self._skipped > self._progress.status.watermark >= self._handed:
            await self._progress.commit(self._skipped)

    async def passed(self, seq: int) -> None:
        """The hub found nothing left in the log up to `seq`: it was all forgotten."""
        self._skipped = max(self._skipped, seq)
        await self._commit_skipped()

    async def receive(self) -> StoredInteraction:
        while True:
            await self._commit_skipped()
            if self._take(item := await self._receive.receive()):
                return item

    def receive_nowait(self) -> StoredInteraction:
        while not self._take(item := self._receive.receive_nowait()):
            pass
        return item

    async def aclose(self) -> None:
        await self._receive.aclose()


def _chars(item: StoredInteraction) -> int:
    return sum(len(m.text) for m in item.messages)


class Progress:
    """An observer's handle on its own progress: its watermark, its status and the stop signal."""

    def __init__(
        self,
        store: Backend,
        status: ObserverStatus,
        changed: Callable[[], None],
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self.status = status
        self.stopping = False
        self._changed = changed
        self.metrics = metrics or Metrics()
        self._batch_started = 0.0  # monotonic time the batch in flight began
        self.pending = 0  # work waiting besides the turns past the watermark (facts to embed)

    @property
    def name(self) -> str:
        return self.status.name

    def set_state(self, state: ObserverState, error: str | None = None) -> None:
        """Show `state`; a wait for the model keeps the time it began through the retries (the
        state is `distilling` again while one is tried) until a batch ends."""
        self.status.state = state
        if error is not None:
            self.status.last_error = error
        if state == "waiting_for_llm" and self.status.waiting_since is None:
            self.status.waiting_since = now()
        if state == "idle":
            self.status.batch = self.status.waiting_since = None
        self._changed()

    def follow(self, watermark: int) -> None:
        """Take the watermark another daemon's run of this observer has stored."""
        if watermark > self.status.watermark:
            self.status.watermark = watermark
            self._changed()

    def note_error(self, error: str) -> None:
        """Show the last error without a change of state (a bad answer that will be retried)."""
        self.status.last_error = error

    def model_called(self, seconds: float, outcome: str) -> None:
        """Count a call to the model: `ok`, or the error it ended with, and how long it took."""
        self.metrics.model_calls.labels(self.name, outcome).inc()
        self.metrics.model_seconds.labels(self.name).observe(seconds)

    def _count(self, batches: int, prompt_tokens: int, completion_tokens: int) -> None:
        m, name = self.metrics, self.name
        m.batches.labels(name).inc(max(0, batches))
        m.model_tokens.labels(name, "prompt").inc(max(0, prompt_tokens))
        m.model_tokens.labels(name, "completion").inc(max(0, completion_tokens))

    def start_batch(self, batch: Sequence[StoredInteraction]) -> None:
        """Show the batch being worked on in the status (size, start), until idle again."""
        self._batch_started = time.monotonic()
        self.status.batch = BatchInFlight(len(batch), sum(i.tokens for i in batch), now())
        self.set_state("distilling")

    def refreshed(self, last_seq: int) -> ObserverStatus:
        """The status as of now: the backlog (the turns behind `last_seq` and what else is
        `pending`), the age of the batch in flight."""
        self.status.backlog = max(0, last_seq - self.status.watermark) + self.pending
        if self.status.batch is not None:
            self.status.batch.elapsed_s = round(time.monotonic() - self._batch_started, 1)
        return self.status

    async def _until_stored(self, write: Callable[[], Awaitable[T]]) -> T:
        """Retry a commit while the disk is full: the batch in hand is kept, not re-run."""
        backoff = Backoff(STORAGE_RETRY_INITIAL, STORAGE_RETRY_MAX)
        while True:
            try:
                return await write()
            except StorageFull as exc:
                self.status.last_error = str(exc)
                pause = backoff.next()
                log.warning("commit_storage_full", observer=self.name, retry_in=pause)
                await trio.sleep(pause)

    async def commit(self, seq: int) -> None:
        """Record that every interaction up to `seq` is done (observers without results)."""
        await self._until_stored(lambda: self._store.set_watermark(self.name, seq))
        self.status.watermark = max(self.status.watermark, seq)
        self._changed()

    async def commit_batch(self, outcome: BatchOutcome) -> None:
        """Commit a batch's results together with the watermark, then count what was stored."""
        stored = await self._until_stored(lambda: self._store.commit_batch(self.name, outcome))
        s = self.status
        if outcome.watermark is not None:
            s.watermark = max(s.watermark, outcome.watermark)
        batches = len({run.batch_id for run in stored.runs})  # as the store counts them
        s.batches += batches
        usages = [run.usage for run in stored.runs]
        self._count(
            batches, sum(u.prompt_tokens for u in usages), sum(u.completion_tokens for u in usages)
        )
        for run in stored.runs:
            s.llm_calls += run.usage.calls
            s.prompt_tokens = min(s.prompt_tokens + run.usage.prompt_tokens, MAX_TOTAL)
            s.completion_tokens = min(s.completion_tokens + run.usage.completion_tokens, MAX_TOTAL)
            s.llm_ms = min(s.llm_ms + run.usage.ms, MAX_TOTAL)
            s.ungrounded += run.ungrounded
        s.dead_letters += len(stored.dead_letters) - len(stored.resolved_dead_letters)
        s.last_batch_at = now()
        s.waiting_since = None  # its model answered, or gave up on what it could not answer
        self._changed()

    async def commit_with(self, write: Callable[[], Awaitable[T]]) -> T:
        """Commit an observer's own results (its progress in the same transaction), then take
        the totals the store counts. Retried while the disk is full, like every commit."""
        stored = await self._until_stored(write)
        self.recount(await self._store.observer_totals(self.name))
        return stored

    def recount(self, totals: ObserverStatus) -> None:
        """Take the totals the store counts now (after a forget erased some of the work)."""
        s = self.status
        # what was done since (an observer committing its own results); a forget only lowers
        self._count(
            totals.batches - s.batches,
            totals.prompt_tokens - s.prompt_tokens,
            totals.completion_tokens - s.completion_tokens,
        )
        s.batches, s.llm_calls, s.llm_ms = totals.batches, totals.llm_calls, totals.llm_ms
        s.prompt_tokens, s.completion_tokens = totals.prompt_tokens, totals.completion_tokens
        s.dead_letters, s.last_batch_at = totals.dead_letters, totals.last_batch_at
        self._changed()


class Observer(Protocol):
    """A plugin that sees every stored interaction in seq order and commits its progress."""

    name: str

    async def run(self, interactions: Feed, progress: Progress) -> None:
        """Handle interactions for the daemon's whole life; returning is an error."""
        ...


class Derived(Protocol):
    """What is kept from the log beside the store (the turn index): told at once what was
    erased from it, so that no copy outlives the turn."""

    def forget(self, scope: str) -> None: ...

    def delete(self, seq: int) -> None: ...


class Hub:
    """The observer registry: one supervised feeder and channel per observer."""

    def __init__(self, store: Backend, observers: list[Observer], channel_capacity: int) -> None:
        names = [o.name for o in observers]
        if len(set(names)) != len(names):
            raise ValueError(f"observer names must be unique: {names}")
        self._store = store
        self._observers = observers
        self._capacity = channel_capacity
        self._appended = trio.Event()
        self._changed = trio.Event()
        self.metrics = Metrics()  # the daemon's registry: the observers' counts, the API's
        self.progress: dict[str, Progress] = {}
        self.feeds: dict[str, Feed] = {}  # each observer's queue in its current life
        self.derived: list[Derived] = []  # indexes kept from the log beside the observers

    def observer(self, name: str) -> Observer | None:
        """The registered observer called `name`, if any."""
        return next((o for o in self._observers if o.name == name), None)

    def appended(self) -> trio.Event:
        """The event the next append to the log sets."""
        return self._appended

    def notify_appended(self) -> None:
        """Wake the feeders: the log has grown."""
        self._appended.set()
        self._appended = trio.Event()

    def _notify_changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def refresh(self) -> None:
        """Take the log's totals and the watermarks from the store: on a shared database other
        daemons append and commit too, and a status must tell the store's truth."""
        for name, watermark in (await self._store.refresh_totals()).items():
            if (progress := self.progress.get(name)) is not None:
                progress.follow(watermark)

    def statuses(self) -> list[ObserverStatus]:
        return [p.refreshed(self._store.last_seq) for p in self.progress.values()]

    def backlog(self) -> int:
        """How far the slowest observer lags behind the log."""
        return max((s.backlog for s in self.statuses()), default=0)

    def change(self) -> trio.Event:
        """The event the next change of any observer's state or progress sets: taken before a
        check that awaits, it also catches a change made while the check ran."""
        return self._changed

    async def changed(self) -> None:
        """Return at the next change of any observer's state or progress."""
        await self._changed.wait()

    async def wait_idle(self) -> None:
        """Return once no observer is in the middle of a batch."""
        while any(p.status.state == "distilling" for p in self.progress.values()):
            await self.changed()

    async def forget(self, scope: str) -> Deleted:
        """Erase a scope from the store and from every observer's queue; recount the totals."""
        forgotten = await self._store.forget(scope, list(self.progress))
        for name, progress in self.progress.items():  # no checkpoint since the erase committed
            if name in self.feeds:
                self.feeds[name].forget(scope, forgotten.through)
            progress.recount(forgotten.totals[name])
        for index in self.derived:
            index.forget(scope)
        deleted = forgotten.deleted
        log.info(
            "scope_forgotten",
            scope=scope,
            interactions=deleted.interactions,
            summaries=deleted.summaries,
            facts=deleted.facts,
        )
        return deleted

    async def delete(self, item: str, item_id: int, within: str | None = None) -> Erased:
        """Erase one interaction, summary or fact (of scope `within`, if given); a deleted
        interaction leaves every queue."""
        scope, erased = await self._store.delete(item, item_id, within)
        if item == "interaction":
            for feed in self.feeds.values():  # no checkpoint since the erase committed
                feed.erase(item_id)
            for index in self.derived:
                index.delete(item_id)
            for name, progress in self.progress.items():  # its dead letters went with it
                progress.recount(await self._store.observer_totals(name))
        deleted = erased.deleted
        log.info(
            "item_deleted",
            scope=scope,
            item=item,
            id=item_id,
            edit=erased.edit,
            summaries=deleted.summaries,
            facts=deleted.facts,
        )
        return erased

    def stop(self) -> None:
        """Ask observers to finish the batch in hand and take no new one."""
        for p in self.progress.values():
            p.stopping = True
        self._notify_changed()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        for observer in self._observers:
            status = await self._store.observer_totals(observer.name)
            self.progress[observer.name] = Progress(
                self._store, status, self._notify_changed, self.metrics
            )
        async with trio.open_nursery() as nursery:
            for observer in self._observers:
                nursery.start_soon(self._supervise, observer)
            task_status.started()

    async def _supervise(self, observer: Observer) -> None:
        progress = self.progress[observer.name]
        backoff = Backoff(RESTART_INITIAL, RESTART_MAX)
        while True:
            started = trio.current_time()
            try:
                await self._run(observer, progress)
            except* Exception as group:  # an observer must never take the daemon down
                if trio.current_time() - started > HEALTHY_RUN:
                    backoff.reset()
                pause = backoff.next()
                log.exception("observer_failed", observer=observer.name, restart_in=pause)
                error = leaves(group)[0]  # the observer's own error, not the nurseries' wrappers
                progress.set_state("idle", error=f"{type(error).__name__}: {error}")
            await trio.sleep(pause)

    async def _run(self, observer: Observer, progress: Progress) -> None:
        """One life of an observer: a fresh channel fed from the stored watermark.

        `run` never returns normally: one that does would leave the watermark frozen without a
        word, so it counts as a failure, logged and restarted like an exception.
        """
        send, receive = trio.open_memory_channel[StoredInteraction](self._capacity)
        feed = self.feeds[observer.name] = Feed(receive, progress)
        lease = self._store.lease(observer.name, progress.follow)  # one daemon runs it at a time
        async with lease, trio.open_nursery() as nursery, feed:
            nursery.start_soon(self._feed, send, feed, observer.name)
            await observer.run(feed, progress)
            raise ObserverError(
                f"observer {observer.name!r} returned from run; it must run until cancelled"
            )

    async def _feed(
        self, send: trio.MemorySendChannel[StoredInteraction], feed: Feed, name: str
    ) -> None:
        """Send the log from the watermark on; block (never drop) while the channel is full."""
        cursor = await self._store.watermark(name)  # the stored one: a restart redelivers
        async with send:
            while True:
                appended, end = self._appended, self._store.last_seq
                rows = await self._store.read_log(cursor, min(FEED_CHUNK, self._capacity))
                if not rows:
                    if end > cursor:  # the end of the log was forgotten before it was read
                        cursor = end
                        await feed.passed(end)
                    with trio.move_on_after(self._store.poll_interval):
                        await appended.wait()
                    continue
                for row in rows:
                    await feed.room()
                    await _send(send, row)
                    feed.queued(row)
                    self._notify_changed()  # each: the next send may block for long
                cursor = rows[-1].seq


async def _send(send: trio.MemorySendChannel[T], item: T) -> None:
    """Queue the item, waiting only while the queue is full: a chunk read from the log enters
    the queue whole, without a scheduler pass per row, so an observer's next batch is what
    the log holds, not what the scheduler let through (trio runs woken tasks in a random order)."""
    try:
        send.send_nowait(item)
    except trio.WouldBlock:
        await send.send(item)
