"""The embed observer: a vector for every stored turn (what its people said), and for every
fact and summary as it is written, stored with the observer's progress in one transaction
(docs/embed.md).

Turns arrive in seq order through the observer's own bounded channel and are drained in batches;
facts and summaries are read from the store past the last id embedded (ids are never reused).
The model runs in a worker thread, never on the event loop. A model that cannot be loaded turns
vectors off: the status says why, recall goes on by words, and the daemon runs on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog
import trio

from forged.config import EmbedConfig
from forged.hub import Batcher, Feed, Progress
from forged.models import EMBED_OBSERVER, StoredInteraction, speaker_lines
from forged.store.backend import Backend
from forged.store.cursors import past_ids
from forged.store.portable import portable
from forged.store.records import StoredVector, VectorBatch
from forged.vectors.codec import encode
from forged.vectors.model import Embedder, EmbedderUnavailable

__all__ = ["IDLE_POLL", "EmbedObserver", "turn_lines"]

IDLE_POLL = 1.0  # seconds between looks for new facts and summaries while no turn arrives
_WRITTEN = {  # facts and summaries past the last one embedded, oldest first
    "fact": "SELECT id, text FROM facts WHERE id > ? ORDER BY id LIMIT ?",
    "summary": "SELECT id, text FROM summaries WHERE id > ? ORDER BY id LIMIT ?",
}
_UNEMBEDDED = """
    SELECT (SELECT count(*) FROM facts WHERE id > ?) + (SELECT count(*) FROM summaries WHERE id > ?)
"""  # how many facts and summaries are past the last one embedded
_PROGRESS = "SELECT item, last_id FROM embed_progress WHERE observer = ?"

log = structlog.get_logger(__name__)


def turn_lines(interaction: StoredInteraction) -> str:
    """A turn as it is embedded: one "speaker: text" line per message of a person (the user's,
    and other named speakers'), as it is indexed; the assistant's, system's and tool's only in
    a turn without one. What the user says is the memory, and an agent's answer of hundreds of
    lines would fill most of the 512 tokens the model reads (docs/embed.md has the figures)."""
    people = [m for m in interaction.messages if m.role == "user"]
    return speaker_lines(people or interaction.messages)


def _written(
    conn: Any, progress: dict[str, int], limit: int
) -> tuple[list[tuple[str, int, str]], int]:
    """Facts and summaries not yet embedded: (item, id, text), at most `limit` of each; and how
    many there are in all (the status counts them in the backlog)."""
    sql = portable(conn)
    with past_ids(conn):  # no smaller id commits after these are read (PostgreSQL)
        found = [
            (item, int(key), text)
            for item, query in _WRITTEN.items()
            for key, text in sql.execute(query, (progress.get(item, 0), limit)).fetchall()
        ]
        (left,) = sql.execute(
            _UNEMBEDDED, (progress.get("fact", 0), progress.get("summary", 0))
        ).fetchone()
    return found, int(left)


def _progress(conn: Any, observer: str) -> dict[str, int]:
    return {item: int(last) for item, last in portable(conn).execute(_PROGRESS, (observer,))}


class EmbedObserver:
    """Stores a vector for every turn, fact and summary."""

    def __init__(
        self,
        store: Backend,
        config: EmbedConfig,
        load: Callable[[int], Embedder] = Embedder,
    ) -> None:
        self.name = EMBED_OBSERVER
        self._store = store
        self._config = config
        self._load = load
        self._model: Embedder | None = None
        self._limiter = trio.CapacityLimiter(1)  # one call of the model at a time

    async def _loaded(self, progress: Progress) -> Embedder:
        """The model, loaded once; a failure to load waits here for ever, vectors off."""
        if self._model is None:
            try:
                self._model = await trio.to_thread.run_sync(self._load, self._config.threads)
            except EmbedderUnavailable as exc:
                log.error("embedder_unavailable", observer=self.name, error=str(exc))
                progress.set_state("idle", error=f"vectors off: {exc}")
                await trio.sleep_forever()
        assert self._model is not None
        return self._model

    async def run(self, interactions: Feed, progress: Progress) -> None:
        model = await self._loaded(progress)
        done = await self._store.read(_progress, self.name)
        batcher = Batcher(interactions, max_items=self._config.batch)
        while True:
            turns: list[StoredInteraction] = []
            with trio.move_on_after(IDLE_POLL):
                turns = await batcher.next()
            room = max(0, self._config.batch - len(turns))
            written: list[tuple[str, int, str]] = []
            if room:
                written, progress.pending = await self._store.read(_written, done, room)
            if turns or written:
                await self._embed(model, progress, turns, written[:room], done)

    async def _embed(
        self,
        model: Embedder,
        progress: Progress,
        turns: list[StoredInteraction],
        written: list[tuple[str, int, str]],
        done: dict[str, int],
    ) -> None:
        """Embed one batch in the worker thread; commit its vectors with the progress."""
        items = [("interaction", t.seq, turn_lines(t)) for t in turns] + written
        if turns:
            progress.start_batch(turns)
        else:  # facts and summaries only: busy all the same
            progress.set_state("distilling")
        started = time.monotonic()
        vectors = await trio.to_thread.run_sync(
            model.passages, [text for _, _, text in items], limiter=self._limiter
        )
        rate = len(items) / max(time.monotonic() - started, 1e-6)
        for item, key, _ in written:
            done[item] = max(done.get(item, 0), key)
        batch = VectorBatch(
            [StoredVector(i, k, v) for (i, k, _), v in zip(items, encode(vectors), strict=True)],
            turns[-1].seq if turns else None,
            {i: done[i] for i in {item for item, _, _ in written}},
        )
        await progress.commit_with(lambda: self._store.commit_vectors(self.name, batch))
        if batch.watermark is not None:
            progress.follow(batch.watermark)
        progress.status.items_per_s = round(rate, 1)
        progress.pending = max(0, progress.pending - len(written))
        progress.set_state("idle")
