"""Restore against crafted backups: planted triggers, hidden tables and views are refused by name;
damaged full-text indexes are neutralised, since only rows cross into a freshly made schema;
the restored store then serves as a fresh one does."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
import trio

from forged.config import Config, load_config
from forged.errors import BackupError
from forged.store.backup import inspect_backup, restore_backup, take_backup
from forged.store.rebuild import rebuild_from, untrusted
from forged.store.sqlite_schema import MIGRATIONS, migrate, register_functions
from tests.support.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.support.fakellm import FakeLLM

pytestmark = pytest.mark.sqlite_only  # crafted SQLite files

# What a planted trigger does: moves a victim's turn to the attacker and keeps a copy of it.
_PLANT = """AFTER INSERT ON interactions BEGIN
    INSERT INTO loot SELECT messages FROM interactions WHERE seq = new.seq;
    UPDATE interactions SET scope = 'attacker' WHERE seq = new.seq; END"""
SEED = 35  # the damaged index's bytes are random, the same each run


def _write(path: Path, *statements: str, writable_schema: bool = False) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        if writable_schema:
            db.execute("PRAGMA writable_schema = ON")
        for statement in statements:
            db.execute(statement)


def _trigger(name: str) -> Callable[[Path], None]:
    return lambda path: _write(path, "CREATE TABLE loot (m)", f"CREATE TRIGGER {name} {_PLANT}")


def _reserved_trigger(path: Path) -> None:
    """`sqlite_evil`: a name SQLite refuses to create, written into sqlite_master by hand."""
    _write(path, "CREATE TABLE loot (m)")
    sql = f"CREATE TRIGGER sqlite_evil {_PLANT}".replace("'", "''")
    _write(
        path,
        "INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql)"
        f" VALUES ('trigger', 'sqlite_evil', 'interactions', 0, '{sql}')",
        writable_schema=True,
    )


def _hidden_view(path: Path) -> None:
    _write(path, "CREATE VIEW sqlitex_all AS SELECT * FROM interactions")


CRAFTED = {
    "sqlitex_copy": (_trigger("sqlitex_copy"), "an unknown trigger sqlitex_copy"),
    "SQLITE1": (_trigger("SQLITE1"), "an unknown trigger SQLITE1"),
    "sqlite9x": (_trigger("sqlite9x"), "an unknown trigger sqlite9x"),
    "sqlite_evil": (_reserved_trigger, "an unknown trigger sqlite_evil"),
    "hidden-table": (lambda p: _write(p, "CREATE TABLE sqlite9t (x)"), "an unknown table sqlite9t"),
    "hidden-view": (_hidden_view, "an unknown view sqlitex_all"),
}


def _random_bytes(path: Path) -> None:
    """Random bytes over every block of the turns' and the facts' indexes."""
    rng = random.Random(SEED)
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        for table in ("interactions_fts_data", "facts_fts_data"):
            rows = db.execute(f"SELECT id, length(block) FROM {table}").fetchall()
            for rowid, size in rows:
                noise = rng.randbytes(size or 16)
                db.execute(f"UPDATE {table} SET block = ? WHERE id = ?", (noise, rowid))


def _version_999(path: Path) -> None:
    _write(
        path,
        *(
            f"UPDATE {fts}_config SET v = 999 WHERE k = 'version'"
            for fts in ("interactions_fts", "facts_fts", "summaries_fts")
        ),
    )


def _empty_docsize(path: Path) -> None:
    _write(
        path,
        *(
            f"DELETE FROM {fts}_docsize"
            for fts in ("interactions_fts", "facts_fts", "summaries_fts")
        ),
    )


DAMAGED = {
    "random-data": _random_bytes,
    "version-999": _version_999,
    "empty-docsize": _empty_docsize,
}


def _schema(path: Path) -> set[tuple[str, str]]:
    with closing(sqlite3.connect(path)) as db:
        return set(db.execute("SELECT type, name FROM sqlite_master"))


def _fresh_schema() -> set[tuple[str, str]]:
    with closing(sqlite3.connect(":memory:", isolation_level=None)) as db:
        migrate(db)
        return set(db.execute("SELECT type, name FROM sqlite_master"))


def _index_problems(path: Path) -> list[str]:
    """What FTS5's own checks say of each index: each compared with the rows it indexes, where
    its content can be read back (the turns' view cannot be, from inside FTS5)."""
    problems = []
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        register_functions(db)  # the indexed views call them
        for fts, rank in (("interactions_fts", ""), ("facts_fts", ", 1"), ("summaries_fts", ", 1")):
            column = ", rank" if rank else ""
            try:
                db.execute(f"INSERT INTO {fts} ({fts}{column}) VALUES ('integrity-check'{rank})")
            except sqlite3.DatabaseError as exc:
                problems.append(f"{fts}: {exc}")
    return problems


async def _backup_of_a_used_store(directory: Path, llm: FakeLLM) -> Path:
    """A backup of a store that served turns of two scopes and distilled them."""
    await trio.Path(directory).mkdir()
    config = load_config(write_config(directory, llm.base_url), {})
    turns = [
        {"scope": scope, "messages": [{"role": "user", "text": f"I keep {what} on the roof."}]}
        for scope, what in (("victim", "bees"), ("victim", "pigeons"), ("other", "tomatoes"))
    ]
    async with running_daemon(config), socket_client(config.server.socket) as client:
        await client.post("/v1/interactions", json=turns)
        await wait_for_watermark(client, len(turns))
    backup = directory / "b.db"
    await trio.to_thread.run_sync(take_backup, config.store, backup)
    return backup


async def _serve_restored(config: Config) -> dict[str, object]:
    """On the restored store: a push to `victim`, where it lands, search, forget, a backup."""
    turn = {"scope": "victim", "messages": [{"role": "user", "text": "My locker code is new."}]}
    async with running_daemon(config), socket_client(config.server.socket) as client:
        pushed = await client.post("/v1/interactions", json=turn)
        await wait_for_watermark(client, pushed.json()["last_seq"])
        victim = (await client.get("/v1/interactions", params={"scope": "victim"})).json()
        attacker = (await client.get("/v1/interactions", params={"scope": "attacker"})).json()
        search = await client.get("/v1/search", params={"q": "bees roof", "scope": "victim"})
        forget = await client.delete("/v1/scopes/other")
        after = await client.get("/v1/search", params={"q": "tomatoes", "scope": "other"})
    again = Path(config.store.path).with_name("again.db")
    await trio.to_thread.run_sync(take_backup, config.store, again)
    return {
        "pushed": pushed.status_code,
        "victim": [i["messages"][0]["text"] for i in victim["interactions"]],
        "attacker": attacker["interactions"],
        "search": (search.status_code, [r["text"] for r in search.json()["results"]]),
        "forget": (forget.status_code, forget.json()),
        "after": after.json()["results"],
        "again": _schema(again),
    }


@pytest.mark.parametrize("craft", CRAFTED, ids=list(CRAFTED))
async def test_a_planted_object_is_refused_by_name(
    short_tmp: Path, fake_llm: FakeLLM, craft: str
) -> None:
    """Triggers, tables and views the migrations do not make are named and refused, whatever
    their names (LIKE's `_` and case, SQLite's reserved prefix); the database is untouched."""
    backup = await _backup_of_a_used_store(short_tmp / "src", fake_llm)
    prepare, named = CRAFTED[craft]
    prepare(backup)
    live = short_tmp / "live.db"
    live.write_bytes(b"")
    with pytest.raises(
        BackupError, match=rf"^{backup}: not the schema version \d+ makes: .*{named}"
    ):
        restore_backup(backup, str(live), replace=True)
    assert live.read_bytes() == b""


@pytest.mark.parametrize("craft", ["sqlite_evil", "sqlitex_copy"])
async def test_only_rows_cross_even_past_the_check(
    short_tmp: Path, fake_llm: FakeLLM, craft: str
) -> None:
    """Were the schema check fooled, the rebuild still takes rows alone: the copy has the fresh
    schema and nothing planted, and its indexes pass FTS5's checks."""
    backup = await _backup_of_a_used_store(short_tmp / "src", fake_llm)
    CRAFTED[craft][0](backup)
    copy = short_tmp / "copy.db"
    with closing(untrusted(backup)) as source:
        rebuild_from(source, copy, len(MIGRATIONS), backup)
    assert _schema(copy) == _fresh_schema()
    assert inspect_backup(copy).interactions == 3
    assert _index_problems(copy) == []


@pytest.mark.parametrize("damage", DAMAGED, ids=list(DAMAGED))
async def test_a_damaged_index_is_rebuilt_from_the_rows(
    short_tmp: Path, fake_llm: FakeLLM, damage: str
) -> None:
    """A backup whose full-text indexes are damaged restores with indexes made anew: a push to
    `victim` stays there, search and forget answer, FTS5 finds nothing wrong, and a later
    backup holds the fresh schema alone."""
    backup = await _backup_of_a_used_store(short_tmp / "src", fake_llm)
    DAMAGED[damage](backup)
    assert _index_problems(backup) != []  # the damage is real
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    info = restore_backup(backup, config.store.path, replace=False)
    assert (info.interactions, info.facts) == (3, 3)
    assert _index_problems(Path(config.store.path)) == []
    seen = await _serve_restored(config)
    assert seen["pushed"] == 202 and seen["attacker"] == []
    assert seen["victim"][-1] == "My locker code is new."
    status, texts = seen["search"]  # type: ignore[misc]
    assert status == 200 and any("bees" in t for t in texts)
    assert seen["forget"] == (200, {"deleted": {"interactions": 1, "summaries": 1, "facts": 1}})
    assert seen["after"] == []
    assert seen["again"] == _fresh_schema()
