"""The turn index beside the store: its commits and watermark, what it erases, how a damaged
or stale one is rebuilt, and that recall through it ranks as the store's own index does."""

from __future__ import annotations

import random
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import msgspec
import pytest
import tantivy
import trio

from forged.config import Config, load_config
from forged.daemon.runner import Running
from forged.index import turns
from forged.index.turns import SCHEMA_VERSION, TurnIndex, TurnText, terms
from forged.recall import indexed as recall_indexed
from forged.recall import sqlite as recall_sqlite
from forged.recall.fulltext import turn_text
from forged.recall.query import SearchQuery, julian_now
from forged.store.sqlite import Store
from forged.store.sqlite_schema import register_functions
from forged.timestamps import julian_day
from tests.support.daemons import running_daemon, socket_client, write_config
from tests.support.fakellm import FakeLLM
from tests.support.hostile_text import SHAPES, hostile


def _turn(seq: int, text: str, scope: str = "u", at: float = 2460000.5) -> TurnText:
    return TurnText(seq, scope, at, text)


def _seqs(index: TurnIndex, words: list[str], scope: str = "u") -> list[int]:
    wanted = dict.fromkeys((t for w in words for t in terms(w)), 1.0)
    return sorted(index.view.search(scope, wanted, 100, None, None).seq.tolist())


def _terms(directory: Path, field: str, prefix: str) -> list[tuple[str, int]]:
    """What the index's term dictionary holds, read afresh from its files."""
    return list(tantivy.Index.open(str(directory)).searcher().terms_with_prefix(field, prefix))


def test_a_commit_carries_the_watermark_across_a_reopen(tmp_path: Path) -> None:
    """What was committed, and the last seq with it, is there when the index is opened again."""
    index = TurnIndex(tmp_path / "ix")
    assert index.watermark == 0
    index.add([_turn(1, "alice: we chose postgres"), _turn(2, "bob: fine")])
    index.commit(2)
    index.add([_turn(3, "alice: postgres again")])  # never committed: lost with the process
    index.close()
    again = TurnIndex(tmp_path / "ix")
    assert again.watermark == 2
    assert _seqs(again, ["postgres"]) == [1]


def test_a_turn_delivered_twice_is_held_once(tmp_path: Path) -> None:
    """A turn indexed again (a crash between two commits) replaces its copy."""
    index = TurnIndex(tmp_path / "ix")
    index.add([_turn(1, "tea")])
    index.commit(1)
    index.add([_turn(1, "tea")])
    index.commit(1)
    assert index.view.stats().turns == 1


def test_searches_stay_in_their_scope(tmp_path: Path) -> None:
    """Another scope's turns with the same words are never candidates."""
    index = TurnIndex(tmp_path / "ix")
    index.add([_turn(1, "secret plans", scope="a"), _turn(2, "secret plans", scope="b")])
    index.commit(2)
    assert _seqs(index, ["secret"], scope="a") == [1]
    assert _seqs(index, ["secret"], scope="ab") == []


def test_forget_and_delete_leave_searches_at_once(tmp_path: Path) -> None:
    """Erased turns leave the next commit's searches (their terms stay until a rewrite)."""
    index = TurnIndex(tmp_path / "ix")
    index.add([_turn(1, "walrus", scope="a"), _turn(2, "walrus", scope="b"), _turn(3, "walrus")])
    index.commit(3)
    index.forget("a")
    index.delete([3])
    index.commit(3)
    assert _seqs(index, ["walrus"], scope="a") == [] and _seqs(index, ["walrus"]) == []
    assert _seqs(index, ["walrus"], scope="b") == [2]
    assert _terms(tmp_path / "ix", "text", "walrus") == [("walrus", 3)]  # why a rewrite follows


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: (d / "meta.json").write_text("{not json"),
        lambda d: [
            f.write_bytes(random.Random(1).randbytes(f.stat().st_size)) for f in d.iterdir()
        ],
        lambda d: [f.unlink() for f in d.iterdir() if f.name != "meta.json"],
    ],
    ids=["meta.json garbled", "every file random bytes", "segments missing"],
)
def test_a_damaged_index_opens_empty_and_is_refilled(tmp_path: Path, damage: object) -> None:
    """An index that cannot be read is replaced by an empty one: the keeper refills it from
    the log (it is derived; nothing in it is trusted or repaired)."""
    index = TurnIndex(tmp_path / "ix")
    index.add([_turn(1, "zebra")])
    index.commit(1)
    index.close()
    damage(tmp_path / "ix")  # type: ignore[operator]
    again = TurnIndex(tmp_path / "ix")
    assert again.watermark == 0
    again.add([_turn(1, "zebra")])
    again.commit(1)
    assert _seqs(again, ["zebra"]) == [1]


def test_an_index_of_another_version_is_started_again(tmp_path: Path) -> None:
    """An index written by another version of forged (another analyzer) is not read."""
    index = TurnIndex(tmp_path / "ix")
    index.add([_turn(1, "zebra")])
    index.commit(1)
    writer = index._writing()
    writer.delete_documents_by_term("kind", "watermark")
    writer.add_document(tantivy.Document(kind="watermark", seq=1, version=SCHEMA_VERSION + 1))
    writer.commit()
    index.close()
    assert TurnIndex(tmp_path / "ix").watermark == 0


class _Recorder:
    """The analyzer, recording the length of each text it is handed."""

    def __init__(self, analyzer: tantivy.TextAnalyzer) -> None:
        self.analyzer, self.lengths = analyzer, list[int]()

    def analyze(self, text: str) -> list[str]:
        self.lengths.append(len(text))
        return self.analyzer.analyze(text)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_long_text_is_analyzed_a_piece_at_a_time(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tantivy's analyzer holds the GIL the event loop needs: a megabyte turn (its length is
    counted as it is indexed, a tail turn's terms at every search) is handed to it in pieces,
    and its terms are the same as in one call."""
    text = hostile(shape, 1_000_000, 3)
    whole = turns._TERMS.analyze(text)
    recorder = _Recorder(turns._TERMS)
    monkeypatch.setattr(turns, "_TERMS", recorder)
    assert terms(text) == whole
    assert max(recorder.lengths) <= turns.MAX_ANALYZED
    assert sum(recorder.lengths) == len(text)


def test_a_long_turns_bm25_is_over_its_exact_length(tmp_path: Path) -> None:
    """tantivy reads a turn's length rounded past 40 terms; the score recall ranks by is FTS5's
    formula over the exact length."""
    index = TurnIndex(tmp_path / "ix")
    lengths = range(30, 400)
    index.add(
        TurnText(n, "u", 2460000.5, " ".join(["xylo"] + [f"f{i}z" for i in range(n - 1)]))
        for n in lengths
    )
    index.commit(max(lengths))
    weights, stats = {"xylo": 2.0}, index.view.stats()
    matches = index.view.search("u", weights, len(lengths), None, None)
    assert sorted(matches.terms.tolist()) == list(lengths)
    rounded = 0  # turns whose score tantivy's rounding alone would put off by 1% or more
    scores = recall_indexed.exact_bm25(matches, stats)
    for length, tantivys, score in zip(matches.terms.tolist(), matches.bm25, scores, strict=True):
        exact = recall_indexed.bm25(Counter({"xylo": 1}), length, weights, stats)
        # within what tantivy's average length (its watermark document counted) moves
        assert score == pytest.approx(exact, rel=3e-3)
        rounded += tantivys != pytest.approx(exact, rel=0.01)
    assert rounded > 150


def _store_of(path: Path, turns: int, seed: int, sessions: int = 0) -> None:
    """`turns` turns of scope u over a year, of words drawn unevenly from a small vocabulary
    (each word ends in z: both stemmers leave it as it is), in `sessions` sessions if any."""
    rng = random.Random(seed)
    words = [f"w{i}z" for i in range(300)]
    weights = [1 / (r + 1) for r in range(len(words))]
    now = datetime.now(UTC)
    Store(str(path)).close()
    conn = sqlite3.connect(path)
    register_functions(conn)  # the log's triggers call them
    rows = []
    for i in range(turns):
        text = " ".join(rng.choices(words, weights, k=rng.randint(4, 24)))
        at = (now - timedelta(days=rng.uniform(0, 365))).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        messages = f'[{{"role":"user","name":"ann","text":"{text}"}}]'
        session = f"s{i % sessions}" if sessions else None
        rows.append((f"c{i}", "u", session, at, at, 10, messages.encode(), b"{}"))
    conn.executemany(
        "INSERT INTO interactions (client_id, scope, session, timestamp, received_at, tokens,"
        " messages, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.commit()
    conn.close()


def _index_of(conn: sqlite3.Connection, directory: Path) -> TurnIndex:
    """An index of every turn of the store, as the keeper writes it."""
    index = TurnIndex(directory)
    rows = conn.execute("SELECT seq, scope, session, timestamp, messages FROM interactions")
    index.add(
        TurnText(seq, scope, julian_day(at), turn_text(m)[1], session)
        for seq, scope, session, at, m in rows
    )
    index.commit(conn.execute("SELECT max(seq) FROM interactions").fetchone()[0])
    return index


def _shared(
    conn: sqlite3.Connection, index: TurnIndex, queries: list[SearchQuery]
) -> tuple[int, int]:
    """How many of the store's own top results search through the index shares, of how many."""
    shared = total = 0
    for query in queries:
        assert recall_indexed.ranked(conn, index.view, query, 30.0, julian_now()) is not None
        exact = [i.id for i in recall_sqlite.search(conn, query, 30.0)]
        through = [i.id for i in recall_sqlite.search(conn, query, 30.0, index=index.view)]
        shared += len(set(exact) & set(through))
        total += len(exact)
    return shared, total


def test_ranking_through_the_index_is_the_stores(tmp_path: Path) -> None:
    """Search through the index gives the same top 10 as FTS5's exact BM25 times decay, for
    one, two and ten words, common ones included."""
    db = tmp_path / "f.db"
    _store_of(db, 3000, seed=7)
    conn = sqlite3.connect(db)
    index = _index_of(conn, tmp_path / "ix")
    rng = random.Random(3)
    queries = [
        SearchQuery(
            q=" ".join(f"w{rng.randrange(300)}z" for _ in range(size)),
            scope="u",
            limit=10,
            types=("interaction",),
        )
        for size in (1, 2, 10) * 20
    ]
    shared, total = _shared(conn, index, queries)
    assert total > 500 and shared / total >= 0.95


def test_sessions_and_periods_are_searched_through_the_index_as_in_the_store(
    tmp_path: Path,
) -> None:
    """A search of one session, or of a period, gives the store's own top 10 through the
    index, and nothing of another session or outside the period."""
    db = tmp_path / "f.db"
    _store_of(db, 3000, seed=5, sessions=7)
    conn = sqlite3.connect(db)
    index = _index_of(conn, tmp_path / "ix")
    first, last = (datetime.now(UTC) - timedelta(days=d) for d in (100, 90))
    since, until = f"{first:%Y-%m-%d}T00:00:00.000Z", f"{last:%Y-%m-%d}T23:59:59.999Z"
    rng = random.Random(4)
    queries = []
    for size in (1, 2, 10) * 10:
        words = " ".join(f"w{rng.randrange(300)}z" for _ in range(size))
        asked = SearchQuery(q=words, scope="u", limit=10, types=("interaction",))
        queries += [
            msgspec.structs.replace(asked, session=f"s{rng.randrange(7)}"),
            msgspec.structs.replace(asked, since=since, until=until),
        ]
    shared, total = _shared(conn, index, queries)
    assert total > 300 and shared / total >= 0.95
    for query in queries:
        for item in recall_sqlite.search(conn, query, 30.0, index=index.view):
            assert query.session in (None, item.session)
            assert query.since is None or since <= item.first_at <= until


def test_a_turn_the_store_no_longer_holds_is_never_found(tmp_path: Path) -> None:
    """A turn erased from the store since the index's last commit is not found; the next best
    take its place."""
    db = tmp_path / "f.db"
    _store_of(db, 500, seed=8)
    conn = sqlite3.connect(db)
    register_functions(conn)  # the log's triggers call them
    index = _index_of(conn, tmp_path / "ix")
    query = SearchQuery(q="w3z w40z", scope="u", limit=10, types=("interaction",))
    # the fused ranking, before search weighs its later places by coverage
    (fused,) = recall_sqlite.searches(conn, query, 30.0, [10], index=index.view)
    best = [i.id for i in fused]
    conn.execute("DELETE FROM interactions WHERE seq IN (?, ?)", best[:2])
    (fused,) = recall_sqlite.searches(conn, query, 30.0, [10], index=index.view)
    through = [i.id for i in fused]
    assert through == best[2:] + through[8:] and len(through) == 10


def test_a_query_whose_matches_the_store_turns_down_is_left_to_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_DEPTH winners turned down by the store's rows, the index declines: the store's
    own index ranks the query."""
    monkeypatch.setattr(recall_indexed, "MAX_DEPTH", 5)
    db = tmp_path / "f.db"
    _store_of(db, 500, seed=8)
    conn = sqlite3.connect(db)
    register_functions(conn)
    index = _index_of(conn, tmp_path / "ix")
    conn.execute("DELETE FROM interactions WHERE seq <= 400")
    query = SearchQuery(q="w1z w2z", scope="u", limit=10, types=("interaction",))
    assert recall_indexed.ranked(conn, index.view, query, 30.0, julian_now()) is None
    assert all(i.id > 400 for i in recall_sqlite.search(conn, query, 30.0, index=index.view))


def test_a_query_asking_too_many_windows_is_left_to_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_WINDOWS windows of time asked, the index declines and the store's own index
    ranks the query: what one query costs the index is capped."""
    db = tmp_path / "f.db"
    _store_of(db, 3000, seed=9)
    conn = sqlite3.connect(db)
    index = _index_of(conn, tmp_path / "ix")
    query = SearchQuery(q=" ".join(f"w{i}z" for i in range(10)), scope="u", limit=10)
    assert recall_indexed.ranked(conn, index.view, query, 30.0, julian_now()) is not None
    monkeypatch.setattr(recall_indexed, "MAX_WINDOWS", 1)
    assert recall_indexed.ranked(conn, index.view, query, 30.0, julian_now()) is None
    exact = [i.id for i in recall_sqlite.search(conn, query, 30.0)]
    assert [i.id for i in recall_sqlite.search(conn, query, 30.0, index=index.view)] == exact


def test_turns_the_index_does_not_hold_yet_are_searched(tmp_path: Path) -> None:
    """The log's tail past the index's watermark is scored from the store, in its scope."""
    db = tmp_path / "f.db"
    _store_of(db, 40, seed=1)
    conn = sqlite3.connect(db)
    register_functions(conn)
    conn.execute(
        "INSERT INTO interactions (client_id, scope, session, timestamp, received_at, tokens,"
        " messages, metadata) VALUES ('late', ?, NULL, '2026-01-01T00:00:00.000Z',"
        " '2026-01-01T00:00:00.000Z', 1, ?, x'7b7d')",
        ("u", b'[{"role":"user","text":"an aardvark arrived late"}]'),
    )
    index = TurnIndex(tmp_path / "ix")
    rows = conn.execute("SELECT seq, scope, timestamp, messages FROM interactions WHERE seq <= 40")
    index.add(TurnText(s, sc, julian_day(at), turn_text(m)[1]) for s, sc, at, m in rows)
    index.commit(40)
    query = SearchQuery(q="aardvark", scope="u", limit=10, types=("interaction",))
    assert [i.id for i in recall_sqlite.search(conn, query, 30.0, index=index.view)] == [41]
    elsewhere = SearchQuery(q="aardvark", scope="v", limit=10, types=("interaction",))
    assert recall_sqlite.search(conn, elsewhere, 30.0, index=index.view) == []


def _late_turn(conn: sqlite3.Connection, text: str) -> None:
    """A turn of scope u the store holds, at the end of its log."""
    conn.execute(
        "INSERT INTO interactions (client_id, scope, session, timestamp, received_at, tokens,"
        " messages, metadata) VALUES (?, 'u', NULL, '2026-01-01T00:00:00.000Z',"
        " '2026-01-01T00:00:00.000Z', 1, ?, x'7b7d')",
        (text, msgspec.json.encode([{"role": "user", "text": text}])),
    )


def test_a_search_reads_one_commit_while_the_keeper_makes_the_next(tmp_path: Path) -> None:
    """A view holds its commit: a turn committed after it is the view's tail, counted once
    (read by the next commit's counts with the last one's watermark, it was counted twice, a
    term's turns outnumbered the turns, and search failed on the log of a negative number)."""
    db = tmp_path / "f.db"
    _store_of(db, 40, seed=1)
    conn = sqlite3.connect(db)
    register_functions(conn)
    index = _index_of(conn, tmp_path / "ix")
    for n in range(3):
        _late_turn(conn, f"every turn says w1z w2z {n}")
    index.add(
        TurnText(seq, "u", julian_day("2026-01-01T00:00:00.000Z"), turn_text(m)[1])
        for seq, m in conn.execute("SELECT seq, messages FROM interactions WHERE seq > 40")
    )
    view = index.view
    before = view.watermark, view.stats(), view.documents("w1z")
    index.commit(43)
    assert (view.watermark, view.stats(), view.documents("w1z")) == before
    assert index.view.documents("w1z") == before[2] + 3
    query = SearchQuery(q="w1z w2z", scope="u", limit=10, types=("interaction",))
    exact = {i.id for i in recall_sqlite.search(conn, query, 30.0)}
    for read in (view, index.view):  # the same ten, in an order that may differ by a hair
        assert {i.id for i in recall_sqlite.search(conn, query, 30.0, index=read)} == exact


def test_turns_deleted_from_the_index_still_in_its_counts_are_searched(tmp_path: Path) -> None:
    """A deleted turn's terms still count in a term's turns until its segment merges, while
    the index's turns no longer hold it: a term in every turn that is left then had more turns
    than the index, and search failed."""
    db = tmp_path / "f.db"
    Store(str(db)).close()
    conn = sqlite3.connect(db)
    register_functions(conn)
    for n in range(3):
        _late_turn(conn, f"walrus {n}")
    index = _index_of(conn, tmp_path / "ix")
    index.delete([1, 2])
    index.commit(3)
    conn.execute("DELETE FROM interactions WHERE seq < 3")
    assert index.view.documents("walrus") > index.view.stats().turns
    query = SearchQuery(q="walrus", scope="u", limit=10, types=("interaction",))
    assert [i.id for i in recall_sqlite.search(conn, query, 30.0, index=index.view)] == [3]


def test_a_tail_of_megabytes_is_left_to_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns the index does not hold yet are analysed at every search, of every scope: past
    MAX_TAIL_BYTES of them (another scope's 10 turns of 4 MB made each search take 3 s, not
    3 ms) the store's own index answers, and none of their text is analysed."""
    db = tmp_path / "f.db"
    _store_of(db, 40, seed=1)
    conn = sqlite3.connect(db)
    register_functions(conn)
    index = TurnIndex(tmp_path / "ix")
    rows = conn.execute("SELECT seq, scope, timestamp, messages FROM interactions WHERE seq <= 40")
    index.add(TurnText(s, sc, julian_day(at), turn_text(m)[1]) for s, sc, at, m in rows)
    index.commit(40)
    text = "garden " * (recall_indexed.MAX_TAIL_BYTES // 7)
    conn.execute(
        "INSERT INTO interactions (client_id, scope, session, timestamp, received_at, tokens,"
        " messages, metadata) VALUES ('big', 'v', NULL, '2026-01-01T00:00:00.000Z',"
        " '2026-01-01T00:00:00.000Z', 1, ?, x'7b7d')",
        (msgspec.json.encode([{"role": "user", "text": text}]),),
    )
    analysed = list[int]()

    def counted(text: str) -> list[str]:
        analysed.append(len(text))
        return terms(text)

    monkeypatch.setattr(recall_indexed, "terms", counted)
    query = SearchQuery(q="garden", scope="u", limit=10, types=("interaction",))
    assert recall_indexed.ranked(conn, index.view, query, 30.0, julian_now()) is None
    assert sum(analysed) < recall_indexed.MAX_TAIL_BYTES
    exact = [i.id for i in recall_sqlite.search(conn, query, 30.0)]
    assert [i.id for i in recall_sqlite.search(conn, query, 30.0, index=index.view)] == exact


@pytest.fixture
def shared_pg(short_tmp: Path) -> Path:
    """A directory for two daemons' sockets and indexes; on PostgreSQL they share the test's
    database (write_config gives each the same store URL)."""
    return short_tmp


@pytest.fixture
async def indexed(
    short_tmp: Path, fake_llm: FakeLLM
) -> AsyncIterator[tuple[Config, Running, httpx.AsyncClient]]:
    """A daemon with its turn index, and a client of its socket."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(60):
        async with running_daemon(config) as running, socket_client(config.server.socket) as client:
            yield config, running, client


async def _push(client: httpx.AsyncClient, text: str, scope: str = "u") -> int:
    body = {"scope": scope, "messages": [{"role": "user", "name": "ann", "text": text}]}
    response = await client.post("/v1/interactions", json=body)
    assert response.status_code == 202
    return int(response.json()["last_seq"])


async def _found(client: httpx.AsyncClient, word: str, scope: str = "u") -> list[int]:
    params = {"q": word, "scope": scope, "types": "interaction"}
    return [r["id"] for r in (await client.get("/v1/search", params=params)).json()["results"]]


async def test_a_turn_is_found_by_the_next_search(
    indexed: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """Read your writes: a turn acknowledged before a search is found by it, whether the index
    holds it yet or not (its tail is scored from the store)."""
    _, running, client = indexed
    assert running.turn_index is not None
    for n in range(5):
        seq = await _push(client, f"kumquat{n} harvest")
        assert await _found(client, f"kumquat{n}") == [seq]


async def test_status_shows_the_index_and_reindex_rewrites_it(
    indexed: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """/v1/status shows how far the index follows the log; POST /v1/index/rebuild rewrites
    it from the store, and searches go on."""
    _, running, client = indexed
    seq = await _push(client, "persimmon")
    assert running.turn_index is not None
    await running.turn_index.wait_settled()
    index = (await client.get("/v1/status")).json()["index"]
    assert index == {"state": "ready", "watermark": seq, "backlog": 0, "error": None}
    response = await client.post("/v1/index/rebuild")
    assert response.status_code == 202
    await running.turn_index.wait_settled()
    assert await _found(client, "persimmon") == [seq]
    assert (await client.get("/v1/status")).json()["index"]["watermark"] == seq


async def test_a_deleted_turn_leaves_the_index_files(
    indexed: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """Deleting one turn takes its words out of the index's term dictionary (a rewrite), not
    only out of searches; the other turns' words stay."""
    config, running, client = indexed
    gone = await _push(client, "quetzalcoatlus sighting")
    await _push(client, "ankylosaurus sighting")
    assert running.turn_index is not None
    await running.turn_index.wait_settled()
    directory = config.index.directory(config.store)
    assert _terms(directory, "text", "quetzal")
    assert (
        await client.delete(f"/v1/interactions/{gone}", params={"scope": "u"})
    ).status_code == 200
    await running.turn_index.wait_settled()
    assert _terms(directory, "text", "quetzal") == []
    assert _terms(directory, "text", "ankylo")


async def test_a_missing_or_stale_index_is_rebuilt_on_start(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Deleted, or holding seqs the store never gave (another store's), the index is built
    again from the store when the daemon starts."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    directory = config.index.directory(config.store)
    with trio.fail_after(60):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            seq = await _push(client, "bandicoot")
    stale = TurnIndex(directory)
    stale.add([_turn(seq + 50, "wombat")])
    stale.commit(seq + 50)
    stale.close()
    for _ in range(2):
        with trio.fail_after(60):
            async with (
                running_daemon(config) as running,
                socket_client(config.server.socket) as client,
            ):
                assert running.turn_index is not None
                await running.turn_index.wait_settled()
                assert running.turn_index.watermark == seq
                assert await _found(client, "bandicoot") == [seq]
                assert await _found(client, "wombat") == []
        for path in directory.iterdir():  # the second start: the index is gone altogether
            path.unlink()


async def test_with_the_index_turned_off_search_still_works(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """`[index] enabled = false`: no index directory, the store's own index answers."""
    path = write_config(short_tmp, fake_llm.base_url, index={"enabled": False})
    config = load_config(path, {})
    with trio.fail_after(60):
        async with running_daemon(config) as running, socket_client(config.server.socket) as client:
            seq = await _push(client, "capybara")
            assert await _found(client, "capybara") == [seq]
            assert running.turn_index is None
            assert (await client.get("/v1/status")).json()["index"] is None
            refused = await client.post("/v1/index/rebuild")
            assert refused.status_code == 409
            assert refused.json()["error"]["code"] == "index_disabled"
    assert not config.index.directory(config.store).exists()


async def test_a_word_inside_a_cjk_sentence_is_found_through_the_index(
    indexed: tuple[Config, Running, httpx.AsyncClient],
) -> None:
    """The index holds CJK runs as characters and pairs, as the store's index does."""
    _, running, client = indexed
    seq = await _push(client, "我们下周去北京旅行")
    await _push(client, "東京で会議があります")
    assert running.turn_index is not None
    await running.turn_index.wait_settled()
    assert (await _found(client, "北京"))[0] == seq  # 東京 shares a character: second
    assert await _found(client, "上海") == []


async def test_daemons_on_one_postgresql_each_keep_an_index_and_erase_from_it(
    store_backend: str, shared_pg: Path, fake_llm: FakeLLM
) -> None:
    """Two daemons sharing one PostgreSQL database: each keeps an index of its own, fed from
    the shared log, finds what the other was told, and a scope one of them forgets leaves the
    other's index files too."""
    if store_backend != "postgresql":
        pytest.skip("daemons share a store on PostgreSQL only")
    configs = []
    for name in ("a", "b"):
        (shared_pg / name).mkdir()
        configs.append(load_config(write_config(shared_pg / name, fake_llm.base_url), {}))
    a, b = configs
    with trio.fail_after(60):
        async with (
            running_daemon(a) as on_a,
            running_daemon(b) as on_b,
            socket_client(a.server.socket) as client_a,
            socket_client(b.server.socket) as client_b,
        ):
            seq = await _push(client_a, "okapi sighting", scope="gone")
            kept = await _push(client_a, "okapi tracks", scope="kept")
            assert await _found(client_b, "okapi", scope="gone") == [seq]  # its tail, or its index
            assert on_a.turn_index is not None and on_b.turn_index is not None
            while on_b.turn_index.watermark < kept:  # b reads the shared log every half second
                await on_b.turn_index.moved()
            directory_b = b.index.directory(b.store)
            assert _terms(directory_b, "scope", "gone")
            assert (await client_a.delete("/v1/scopes/gone")).status_code == 200
            assert await _found(client_b, "okapi", scope="gone") == []  # read from the store
            while _terms(directory_b, "scope", "gone"):  # b notices at its next look at the log
                await on_b.turn_index.moved()
            assert await _found(client_b, "okapi", scope="kept") == [kept]
    assert a.index.directory(a.store) != directory_b


async def test_an_index_that_cannot_be_written_never_stops_the_daemon(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """A file where the index's directory should be: the daemon serves, searches answer from
    the store, the status says why; once the path is free the index is made and used."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    blocked = config.index.directory(config.store)
    blocked.write_text("not a directory")
    with trio.fail_after(60):
        async with running_daemon(config) as running, socket_client(config.server.socket) as client:
            keeper = running.turn_index
            assert keeper is not None
            while keeper.state != "failed":
                await keeper.moved()
            seq = await _push(client, "narwhal")
            assert await _found(client, "narwhal") == [seq]
            index = (await client.get("/v1/status")).json()["index"]
            assert index["state"] == "failed" and "FileExistsError" in index["error"]
            blocked.unlink()
            await keeper.wait_settled()  # tried again after a second
            assert keeper.watermark == seq and keeper.error is None
