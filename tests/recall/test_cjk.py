"""CJK text search: runs written as characters and pairs, a word inside a sentence found on both
stores, an index that deletes cleanly, and a store of the previous schema reindexed."""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing
from pathlib import Path

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from forged.config import RecallConfig, StoreConfig
from forged.models import Fact
from forged.recall.engine import Recall
from forged.recall.query import SearchQuery, query_phrases
from forged.store.cjk import CJK_RUN, cjk_grams
from forged.store.postgres import PostgresStore
from forged.store.postgres_schema import MIGRATIONS as PG_MIGRATIONS
from forged.store.records import BatchOutcome, ScopeResult
from forged.store.sqlite import Store
from forged.store.sqlite_schema import MIGRATIONS, register_functions
from tests.conftest import StoreOpener
from tests.support.data import new
from tests.support.postgres import Server

# Memories in each script, and a word of each that sits inside a sentence with no space around it.
TURNS = {
    "zh": ("我们决定下个月搬到杭州工作", "杭州"),
    "ja": ("来週の会議は大阪の本社で開かれます", "大阪"),
    "ko": ("우리는내일부산에서회의를합니다", "부산"),
}
OTHER = "The weather report says rain in Berlin tomorrow."


def test_a_run_becomes_its_characters_and_overlapping_pairs() -> None:
    """Each CJK run is written as its characters and pairs in reading order; the rest stays."""
    assert cjk_grams("東京都") == " 東 東京 京 京都 都 "
    assert cjk_grams("iPhone手机 ok") == "iPhone 手 手机 机  ok"
    assert cjk_grams("한국어") == " 한 한국 국 국어 어 "
    assert cjk_grams("カタカナー") == " カ カタ タ タカ カ カナ ナ ナー ー "


def test_text_without_cjk_is_left_as_it_is() -> None:
    """English, German, accented and NUL-bearing text is not touched: the index of it is the same."""
    for text in ("", OTHER, "Donaudampfschifffahrt über Äpfel", "a\x00b", "€ 12,50 — ok"):
        assert cjk_grams(text) == text


@given(st.text())
def test_the_rest_of_the_text_is_kept_and_the_growth_is_linear(text: str) -> None:
    """Outside the runs every word stays as it was; a run of n characters becomes 5n - 2."""
    grams = cjk_grams(text)
    assert re.sub(CJK_RUN, " ", grams).split() == re.sub(CJK_RUN, " ", text).split()
    assert len(grams) <= 5 * len(text)


def test_a_query_holds_the_pairs_of_its_cjk_words() -> None:
    """A query in Chinese is searched for the same characters and pairs as the index holds."""
    assert query_phrases("杭州 weather") == ['"杭"', '"杭州"', '"州"', '"weather"']


async def _search(store: object, q: str) -> list[str]:
    recall = Recall(store, RecallConfig())  # type: ignore[arg-type]
    found = await recall.search(SearchQuery(q=q, scope="s", limit=5))
    return [i.text for i in found]


@pytest.mark.parametrize("language", sorted(TURNS))
async def test_a_word_inside_a_cjk_sentence_is_found(
    open_store: StoreOpener, language: str
) -> None:
    """A word in the middle of a Chinese, Japanese or Korean sentence finds it, and not the rest."""
    text, word = TURNS[language]
    store = open_store()
    await store.append([[new(text), new(OTHER), new("我们在上海")]])
    found = await _search(store, word)
    store.close()
    assert found == [f"user: {text}"]


async def test_a_cjk_fact_is_found_and_leaves_the_index_when_deleted(
    open_store: StoreOpener,
) -> None:
    """A distilled fact in Chinese is found by a word inside it; deleted, it is found no more."""
    store = open_store()
    await store.append([[new("随便说说")]])
    fact = Fact("state", "用户的猫叫小白，今年三岁。", sources=[1])  # noqa: RUF001 (Chinese commas)
    result = ScopeResult("b1", "s", None, "", [fact], 1, 1)
    await store.commit_batch("distill", BatchOutcome([result], [], [], None))
    assert await _search(store, "小白") == [fact.text]
    await store.delete("fact", 1)
    assert await _search(store, "小白") == []
    store.close()


def _version_of(name: str, migrations: tuple[tuple[str, str], ...] = MIGRATIONS) -> int:
    """The schema version of the migration whose name starts with `name`."""
    return next(n for n, (m, _) in enumerate(migrations, start=1) if m.startswith(name))


_OLD_TURN = """INSERT INTO interactions
    (client_id, scope, session, timestamp, received_at, tokens, messages, metadata)
    VALUES (NULL, 's', NULL, '2026-11-29T17:00:00Z', '2026-11-29T17:00:00Z', 3, ?, NULL)"""


async def test_a_store_of_the_previous_schema_is_reindexed(tmp_path: Path) -> None:
    """Turns stored before CJK pairs existed are found by a word inside them once the store is
    opened by this forged; one deleted then leaves the index, the others stay."""
    path = tmp_path / "f.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY,"
            " name text NOT NULL, applied_at text NOT NULL)"
        )
        for version, (name, sql) in enumerate(MIGRATIONS[: _version_of("CJK") - 1], start=1):
            conn.executescript(
                f"BEGIN;\n{sql};\nINSERT INTO schema_migrations VALUES"
                f" ({version}, '{name}', 'then');\nCOMMIT;"
            )
        for text, _ in TURNS.values():
            conn.execute(_OLD_TURN, (json.dumps([{"role": "user", "text": text}]).encode(),))
    store = Store(str(path))
    for text, word in TURNS.values():
        assert await _search(store, word) == [f"user: {text}"]
    await store.delete("interaction", 1)
    assert await _search(store, TURNS["zh"][1]) == []
    assert await _search(store, TURNS["ja"][1]) == [f"user: {TURNS['ja'][0]}"]
    store.close()
    with closing(sqlite3.connect(path)) as conn:  # (FTS5 cannot check the turns' index: its view)
        register_functions(conn)
        for table in ("facts_fts", "summaries_fts"):
            conn.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', 1)")


async def test_a_postgresql_store_of_the_previous_schema_is_reindexed(postgres: Server) -> None:
    """On PostgreSQL too: turns stored before are found by a word inside them."""
    url = postgres.new_database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY,"
            " name text NOT NULL, applied_at text NOT NULL)"
        )
        for version, (name, sql) in enumerate(
            PG_MIGRATIONS[: _version_of("CJK", PG_MIGRATIONS) - 1], start=1
        ):
            conn.execute(sql)
            conn.execute("INSERT INTO schema_migrations VALUES (%s, %s, 'x')", (version, name))
        for text, _ in TURNS.values():
            messages = json.dumps([{"role": "user", "text": text}]).encode()
            conn.execute(_OLD_TURN.replace("?", "%s"), (messages,))
    store = PostgresStore(StoreConfig(url=url))
    try:
        for text, word in TURNS.values():
            assert await _search(store, word) == [f"user: {text}"]
    finally:
        store.close()
