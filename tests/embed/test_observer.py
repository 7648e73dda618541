"""The embed observer and recall by meaning: vectors for turns, facts and summaries, stored with
the watermark; bad input; a model that fails to load; erasure; hybrid search on both stores."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import trio

from forged.config import EmbedConfig, RecallConfig
from forged.embed.observer import EmbedObserver
from forged.hub import Hub
from forged.models import EMBED_OBSERVER, Fact, Message
from forged.recall import dense, fusion
from forged.recall.engine import Recall
from forged.recall.fusion import hybrid
from forged.recall.meaning import Meaning
from forged.recall.query import SearchQuery
from forged.store.backend import Backend
from forged.store.portable import portable
from forged.store.records import (
    BatchOutcome,
    NewInteraction,
    ScopeResult,
    StoredVector,
    VectorBatch,
)
from forged.store.sqlite import Store
from forged.vectors.codec import decode, encode, sign_codes
from forged.vectors.model import DIMENSIONS, MAX_TOKENS, Embedder, EmbedderUnavailable, clean
from tests.conftest import StoreOpener
from tests.support.data import new

CONFIG = EmbedConfig(enabled=True, batch=8, query_timeout_ms=60_000)  # tests wait, never race
ZH = "我妹妹去年搬到了杭州，在一家医院当护士。"  # noqa: RUF001 (Chinese commas): my sister, a nurse in Hangzhou
TURNS = [
    ZH,
    "The printer on the third floor keeps jamming.",
    "We planted two apple trees in the backyard.",
]


@pytest.fixture(scope="module")
def model() -> Embedder:
    return Embedder()


def test_stored_vectors_keep_their_direction() -> None:
    """int8 with a scale per vector: each decoded vector points where it did (cosine > 0.999)."""
    vectors = np.random.default_rng(7).normal(size=(20, DIMENSIONS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    back = decode(encode(vectors))
    cosine = (back * vectors).sum(axis=1) / np.linalg.norm(back, axis=1)
    assert cosine.min() > 0.999
    assert sign_codes(vectors).shape == (20, DIMENSIONS // 64)


def test_text_is_cleaned_of_what_the_model_cannot_read() -> None:
    """NUL would end the text early (a C string); a lone surrogate has no UTF-8."""
    assert clean("a\x00b") == "a b"
    assert clean("x\ud800y") == "x?y"


HOSTILE = pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "a\x00b",
        "lone \udcff surrogate",
        "English, 中文, 日本語, 한국어, Ελληνικά",
        "x" * 1_000_000,
    ],
    ids=["empty", "space", "nul", "surrogate", "mixed", "megabyte"],
)


@HOSTILE
def test_any_text_becomes_a_unit_vector(model: Embedder, text: str) -> None:
    """Empty, NUL, lone surrogates, mixed scripts and a megabyte: each one finite unit vector."""
    (vector,) = model.passages([text])
    assert vector.shape == (DIMENSIONS,)
    assert np.isfinite(vector).all()
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-3


@HOSTILE
def test_any_query_becomes_a_unit_vector(model: Embedder, text: str) -> None:
    """A query is cleaned and cut as a stored text is: the same inputs, one unit vector each."""
    vector = model.query(text)
    assert vector.shape == (DIMENSIONS,)
    assert np.isfinite(vector).all()
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-3


def test_a_long_text_is_cut_to_what_one_pass_reads(model: Embedder) -> None:
    """A megabyte is embedded as its first MAX_TOKENS tokens: the same vector as that start."""
    text = "The quarterly report covers sales in every region. " * 20_000
    cut = model._cut(text)
    assert model._model.token_count(cut) <= MAX_TOKENS
    assert text.startswith(cut)
    np.testing.assert_allclose(model.passages([text]), model.passages([cut]), atol=1e-6)


def _scored(n: int, text: str, score: float) -> Any:
    from tests.recall.test_recall import item

    return msgspec.structs.replace(item(n, text), score=score)


def test_hybrid_lets_meaning_decide_when_words_hold_little_of_the_query() -> None:
    """An English question's only true match is Chinese: the best turns by words hold one of
    its four words, so meaning weighs more, and the match ranked first by meaning comes first
    though no word found it."""
    lexical = [_scored(n, f"my sister sent text {n}", 10.0 - n) for n in range(1, 11)]
    dense = [_scored(99, ZH, 0.9), *(_scored(n, f"t {n}", 0.5 - n / 100) for n in (11, 12, 13))]
    fused = hybrid(lexical, dense, "where does my sister work as a nurse these days")
    assert [i.id for i in fused][:3] == [99, 1, 2]
    assert len(fused) == len(lexical)
    assert hybrid(lexical, [], "q") == lexical


def test_hybrid_lets_words_decide_when_the_best_hold_the_whole_query() -> None:
    """When the best turn by words holds every word of the question, the words' order stands;
    an item found by meaning alone comes after them."""
    lexical = [_scored(n, f"apple trees planted {n}", 10.0 - n) for n in range(1, 4)]
    dense = [_scored(99, "orchard", 0.95), _scored(3, "", 0.9), _scored(1, "", 0.5)]
    fused = hybrid(lexical, dense, "apple trees planted")
    assert [i.id for i in fused] == [1, 2, 3]
    assert fusion.WORDS_LEAST < 1  # with fewer of its words held, meaning weighs in
    fused = hybrid(lexical, dense, "apple trees planted orchard cherries blossom")
    assert fused[0].id == 3


def test_hybrid_reads_the_words_hold_sentence_by_sentence() -> None:
    """An agent's long exchange holds every word of a question, one in each of its sentences:
    that earns the words no more than one sentence's share, and the exchange meaning ranks
    first comes first. The same words in one sentence leave the words' order standing."""
    scattered = "We planted them in May. The apple ones came from Ana. Trees need water."
    lexical = [_scored(n, f"{scattered} {n}", 10.0 - n) for n in range(1, 4)]
    dense = [_scored(3, "", 0.95), _scored(1, "", 0.5), _scored(2, "", 0.4)]
    assert hybrid(lexical, dense, "apple trees planted")[0].id == 3
    together = [_scored(n, f"We planted apple trees. {n}", 10.0 - n) for n in range(1, 4)]
    assert [i.id for i in hybrid(together, dense, "apple trees planted")] == [1, 2, 3]
    hostile = [_scored(n, ". " * 500_000 + "apple trees planted", 10.0 - n) for n in (1, 2)]
    assert hybrid(hostile, dense, "apple trees planted")[0].id == 3  # its start alone is read


async def _vectors(store: Backend) -> list[tuple[Any, ...]]:
    sql = "SELECT item, item_id, scope FROM vectors ORDER BY item, item_id"
    return await store.read(lambda c: [tuple(r) for r in portable(c).execute(sql).fetchall()])


async def _until(hub: Hub, done: Any) -> None:
    """Wait, change by change, until `await done()` holds."""
    with trio.fail_after(120):
        while True:
            change = hub.change()
            if await done():
                return
            await change.wait()


@pytest.fixture
async def embedded(open_store: StoreOpener) -> AsyncIterator[tuple[Backend, Hub]]:
    """A store with three turns and a fact, and a hub running the embed observer over it."""
    store = open_store()
    await store.append([[new(text) for text in TURNS]])
    fact = Fact("state", "The user's sister is a nurse in Hangzhou.", sources=[1])
    await store.commit_batch(
        "distill", BatchOutcome([ScopeResult("b1", "s", None, "", [fact], 1, 1)], [], [], None)
    )
    hub = Hub(store, [EmbedObserver(store, CONFIG)], 64)
    async with trio.open_nursery() as nursery:
        await nursery.start(hub.serve)
        await _until(hub, lambda: _has(store, 4))
        yield store, hub
        nursery.cancel_scope.cancel()
    store.close()


async def _has(store: Backend, count: int) -> bool:
    return len(await _vectors(store)) >= count


async def test_every_turn_and_fact_gets_a_vector_with_the_watermark(
    embedded: tuple[Backend, Hub],
) -> None:
    """Three turns and a fact: four vectors, and the observer's watermark at the last turn."""
    store, hub = embedded
    assert await _vectors(store) == [
        ("fact", 1, "s"),
        ("interaction", 1, "s"),
        ("interaction", 2, "s"),
        ("interaction", 3, "s"),
    ]
    assert await store.watermark(EMBED_OBSERVER) == 3
    status = hub.progress[EMBED_OBSERVER].status
    assert status.backlog == 0 or status.watermark == 3
    assert status.items_per_s is not None and status.items_per_s > 0


async def test_an_english_question_finds_a_chinese_memory(embedded: tuple[Backend, Hub]) -> None:
    """By words alone the English question finds nothing Chinese; by meaning it does."""
    store, _ = embedded
    meaning = Meaning(CONFIG)
    await meaning.load()
    query = SearchQuery(
        q="Where does my sister work as a nurse?", scope="s", limit=3, types=("interaction",)
    )
    by_words = await Recall(store, RecallConfig()).search(query)
    by_both = await Recall(store, RecallConfig(), meaning=meaning).search(query)
    assert ZH not in [i.text.removeprefix("user: ") for i in by_words]
    assert by_both[0].text == f"user: {ZH}"


async def test_recall_without_a_model_answers_by_words(embedded: tuple[Backend, Hub]) -> None:
    """A query model that failed to load leaves search as it was by words, and says why."""
    store, _ = embedded

    meaning = Meaning(CONFIG)
    query = SearchQuery(q="apple trees", scope="s", limit=3)
    found = await Recall(store, RecallConfig(), meaning=meaning).search(query)  # not loaded yet
    assert [i.text for i in found] == [f"user: {TURNS[2]}"]


async def test_deleted_and_forgotten_items_leave_no_vector(embedded: tuple[Backend, Hub]) -> None:
    """Deleting a turn and a fact takes their vectors; forgetting the scope takes the rest."""
    store, hub = embedded
    await hub.delete("interaction", 2)
    await hub.delete("fact", 1)
    assert await _vectors(store) == [("interaction", 1, "s"), ("interaction", 3, "s")]
    await hub.forget("s")
    assert await _vectors(store) == []


async def test_a_model_that_fails_to_load_turns_vectors_off(open_store: StoreOpener) -> None:
    """The status says vectors are off and why; the observer waits, the hub runs on."""

    def broken(threads: int) -> Embedder:
        raise EmbedderUnavailable("the embedding model failed to load: OSError: no file")

    store = open_store()
    await store.append([[new("hello")]])
    hub = Hub(store, [EmbedObserver(store, CONFIG, load=broken)], 64)
    async with trio.open_nursery() as nursery:
        await nursery.start(hub.serve)
        status = hub.progress[EMBED_OBSERVER].status

        async def reported() -> bool:
            return status.last_error is not None

        await _until(hub, reported)
        assert status.last_error == (
            "vectors off: the embedding model failed to load: OSError: no file"
        )
        assert status.state == "idle" and status.watermark == 0
        nursery.cancel_scope.cancel()
    store.close()


async def test_hostile_turns_get_vectors_and_hostile_queries_answer(
    open_store: StoreOpener,
) -> None:
    """Mixed scripts, a lone surrogate's stand-in, an emoji alone and a megabyte: the observer
    embeds each turn (the megabyte as its first MAX_TOKENS tokens), and recall with meaning
    answers a query holding NUL, a lone surrogate, mixed scripts or a megabyte."""
    store = open_store()
    hostile = [
        "a\ufffdb nurse",
        "English, 中文, 日本語, 한국어, Ελληνικά",
        "🎉",
        "nurse " * 170_000,
    ]
    await store.append([[new(text) for text in hostile]])
    hub = Hub(store, [EmbedObserver(store, CONFIG)], 64)
    meaning = Meaning(CONFIG)
    await meaning.load()
    recall = Recall(store, RecallConfig(), meaning=meaning)
    async with trio.open_nursery() as nursery:
        await nursery.start(hub.serve)
        await _until(hub, lambda: _has(store, len(hostile)))
        for q in ["nurse\x00", "lone \udcff", "看护 nurse", "nurse " * 170_000]:
            found = await recall.search(SearchQuery(q=q, scope="s", limit=4))
            assert {i.id for i in found} <= {1, 2, 3, 4}
        nursery.cancel_scope.cancel()
    assert await _vectors(store) == [("interaction", n, "s") for n in range(1, 5)]
    store.close()


class _Gated(Embedder):
    """The model, each call waiting for a permit: a test sees the observer mid-batch."""

    def __init__(self, threads: int) -> None:
        super().__init__(threads)
        self.permits = threading.Semaphore(0)

    def passages(self, texts: list[str]) -> Any:
        self.permits.acquire()
        return super().passages(texts)


async def test_the_status_counts_facts_waiting_for_vectors_and_shows_work(
    open_store: StoreOpener,
) -> None:
    """A distilled batch's facts are in the backlog until embedded, and the observer is busy,
    not idle, while it embeds facts alone."""
    store = open_store()
    await store.append([[new(TURNS[1])]])
    facts = [Fact("state", f"The printer on floor {n} jams.", sources=[1]) for n in (1, 2, 3)]
    await store.commit_batch(
        "distill", BatchOutcome([ScopeResult("b1", "s", None, "", facts, 1, 1)], [], [], None)
    )
    models: list[_Gated] = []

    def gated(threads: int) -> Embedder:
        models.append(_Gated(threads))
        return models[-1]

    hub = Hub(store, [EmbedObserver(store, msgspec.structs.replace(CONFIG, batch=2), gated)], 64)

    async with trio.open_nursery() as nursery:
        await nursery.start(hub.serve)
        progress = hub.progress[EMBED_OBSERVER]

        async def busy(turns: bool) -> bool:
            status = progress.status
            return status.state == "distilling" and (status.batch is not None) == turns

        try:
            await _until(hub, lambda: busy(True))  # the turn and one fact, in the model
            assert progress.refreshed(1).backlog == 1 + 3
            models[0].permits.release()
            await _until(hub, lambda: busy(False))  # the two facts left, no turn
            assert progress.refreshed(1).backlog == 2
            models[0].permits.release()
            await _until(hub, lambda: _has(store, 4))
            await _until(hub, lambda: _idle(progress.status))
            assert progress.refreshed(1).backlog == 0
        finally:  # a failed check must not leave the model's thread waiting for ever
            for model in models:
                model.permits.release(8)
        nursery.cancel_scope.cancel()
    store.close()


async def _idle(status: Any) -> bool:
    return bool(status.state == "idle")


async def test_a_turn_is_embedded_by_what_its_people_said(
    open_store: StoreOpener, model: Embedder
) -> None:
    """An agent's long answer is left out of its turn's vector: the vector is the user's words
    alone. A turn the assistant alone speaks in keeps its own words."""
    said = Message("user", "We planted two apple trees in the backyard.", name="Ana")
    answer = "\n".join(f"## Step {n}: review the quarterly budget spreadsheet" for n in range(40))
    note = Message("assistant", "Reminder: the printer on the third floor jams.")
    stamp = "2026-11-29T17:00:00.000Z"
    turns = [
        NewInteraction(None, "s", None, stamp, stamp, 9, msgspec.json.encode(messages), None)
        for messages in ([said, Message("assistant", answer)], [note])
    ]
    store = open_store()
    await store.append([turns])
    hub = Hub(store, [EmbedObserver(store, CONFIG)], 64)
    async with trio.open_nursery() as nursery:
        await nursery.start(hub.serve)
        await _until(hub, lambda: _has(store, 2))
        nursery.cancel_scope.cancel()
    sql = "SELECT vector FROM vectors ORDER BY item_id"
    rows = await store.read(lambda c: portable(c).execute(sql).fetchall())
    stored = decode([bytes(vector) for (vector,) in rows])
    alone = model.passages([f"Ana: {said.text}", f"assistant: {note.text}"])
    whole = model.passages([f"Ana: {said.text}\nassistant: {answer}"])
    assert all(float(v @ a) > 0.99 for v, a in zip(stored, alone, strict=True))
    assert float(stored[0] @ whole[0]) < 0.95
    store.close()


def _ignore(_watermark: int) -> None:
    pass


async def test_deleted_items_never_take_the_candidates_places(
    open_store: StoreOpener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns deleted after the index read their codes were nearest the query and took every
    candidate's place: the turn the store still holds was never found by meaning. Their codes
    leave once their vectors are found gone, and it is."""
    monkeypatch.setattr(dense, "CANDIDATES", 2)
    store = open_store()
    await store.append([[new(f"turn {n}") for n in (1, 2, 3)]])
    rng = np.random.default_rng(11)
    near = rng.normal(size=DIMENSIONS).astype(np.float32)
    near /= np.linalg.norm(near)
    further = near + rng.normal(size=DIMENSIONS).astype(np.float32) * 0.05
    further /= np.linalg.norm(further)
    vectors = encode(np.stack([near, near, further]))
    async with store.lease(EMBED_OBSERVER, _ignore):
        stored = [StoredVector("interaction", n, vectors[n - 1]) for n in (1, 2, 3)]
        await store.commit_vectors(EMBED_OBSERVER, VectorBatch(stored, None, {}))
    index = dense.DenseIndex()
    query = SearchQuery(q="turn", scope="s", limit=10, types=("interaction",))

    async def found() -> list[int]:
        def ranked(conn: Any) -> list[int]:
            index.catch_up(conn)
            return [i.id for i in index.ranked(conn, "interaction", query, near)]

        return await store.read(ranked)

    try:
        assert await found() == [1, 2]  # the third, further away, is no candidate
        for seq in (1, 2):
            await store.delete("interaction", seq)
        assert await found() == [3]
        assert index.size == 1
    finally:
        store.close()


class _SlowReader(sqlite3.Connection):
    """A reader whose reads of new vectors wait until `go` is set (a catch-up in flight), or
    SLOW_READ_CAP seconds; `read` is set once one went on."""

    entered: threading.Event
    go: threading.Event
    read: threading.Event

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if "FROM vectors WHERE id >" in sql:
            self.entered.set()
            self.go.wait(SLOW_READ_CAP)
            self.read.set()
        return super().execute(sql, *args)


SLOW_READ_CAP = 10.0  # seconds a held read waits at most: a failing test ends, never hangs


def test_forgetting_a_scope_never_waits_for_a_catch_up_reading_the_store(
    tmp_path: Path,
) -> None:
    """A forget (called on the event loop) while a search's catch-up reads new vectors: it
    returns at once. It waited for the whole catch-up, every request with it."""
    store = Store(str(tmp_path / "f.db"))
    reader = sqlite3.connect(store.path, factory=_SlowReader, check_same_thread=False)
    reader.entered, reader.go, reader.read = threading.Event(), threading.Event(), threading.Event()
    index = dense.DenseIndex()
    catching_up = threading.Thread(target=index.catch_up, args=(reader,))
    catching_up.start()
    try:
        assert reader.entered.wait(SLOW_READ_CAP)
        index.forget("s")
        assert not reader.read.is_set()  # returned while the catch-up still read
    finally:
        reader.go.set()
        catching_up.join()
        reader.close()
        store.close()
