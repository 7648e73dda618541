"""Backup and restore: a live copy loses nothing acknowledged, and restore never races a daemon."""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from forged.config import DEFAULT_CONFIG_PATH, StoreConfig, load_config
from forged.errors import BackupError, StoreError
from forged.store import backup as backup_module
from forged.store.backup import (
    DatabaseLock,
    _exclusive,
    _how_to_stop,
    inspect_backup,
    restore_backup,
    take_backup,
)
from forged.store.records import NewInteraction
from forged.store.sqlite import Store
from forged.store.sqlite_schema import MIGRATIONS
from tests.support.daemons import running_daemon, socket_client, write_config
from tests.support.fakellm import FakeLLM

CLIENTS = 4  # concurrent pushers during the backup
BEFORE = 60  # interactions acknowledged before the backup begins, at least
AFTER = 40  # more acknowledged after it returns: ingest went on

pytestmark = pytest.mark.sqlite_only  # copies of the SQLite file: PostgreSQL has pg_dump


def _ids(database: Path) -> set[str]:
    with sqlite3.connect(database) as db:
        return {i for (i,) in db.execute("SELECT client_id FROM interactions")}


def _database(directory: Path, interactions: int = 3) -> StoreConfig:
    """A database holding `interactions` (ids id-0, id-1...), written by the store itself."""
    config = StoreConfig(path=str(directory / "forged.db"))
    store = Store(config.path)
    rows = [
        NewInteraction(f"id-{n}", "default", None, "t", "t", 1, b"[]", None)
        for n in range(interactions)
    ]
    trio.run(store.append, [rows])
    store.close()
    return config


async def test_backup_under_load_restores_everything_acknowledged_before_it(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Concurrent pushes go on through the backup; its restore holds every id acked before it."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    backup = short_tmp / "nightly.db"
    acked: list[str] = []
    waiting: list[tuple[int, trio.Event]] = []

    async def acked_at_least(n: int) -> None:
        reached = trio.Event()
        waiting.append((n, reached))
        if len(acked) >= n:
            reached.set()
        await reached.wait()

    async def push(client_no: int) -> None:
        async with socket_client(config.server.socket) as client:
            for n in range(10_000):
                turn = {"id": f"c{client_no}-{n}", "messages": [{"role": "user", "text": f"t{n}"}]}
                answer = await client.post("/v1/interactions", json=turn)
                assert answer.status_code == 202
                acked.append(turn["id"])
                for n, reached in waiting:
                    if len(acked) >= n:
                        reached.set()

    with trio.fail_after(60):
        async with running_daemon(config), trio.open_nursery() as nursery:
            for client_no in range(CLIENTS):
                nursery.start_soon(push, client_no)
            await acked_at_least(BEFORE)
            before = set(acked)
            info = await trio.to_thread.run_sync(take_backup, config.store, backup)
            await acked_at_least(len(acked) + AFTER)
            nursery.cancel_scope.cancel()
    fresh = short_tmp / "restored" / "forged.db"
    fresh.parent.mkdir()  # restore creates no directory: a wrong path must not become one
    restored = restore_backup(backup, str(fresh), replace=False)
    assert before <= _ids(fresh)
    assert restored == info and info.interactions == len(_ids(fresh)) >= len(before)
    assert len(_ids(short_tmp / "forged.db")) > info.interactions  # ingest went on after it
    Store(str(fresh)).close()  # the daemon's store opens what was restored


def test_a_backup_is_private_and_says_what_it_holds(short_tmp: Path) -> None:
    """The file is 0600, self-contained (no -wal beside it) and replaces an older one whole."""
    store = _database(short_tmp)
    target = short_tmp / "b.db"
    target.write_text("last night's")
    info = take_backup(store, target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in short_tmp.iterdir() if p.name.startswith("b.db")) == ["b.db"]
    assert (info.interactions, info.last_seq, info.schema_version) == (3, 3, len(MIGRATIONS))
    assert info.describe().startswith(
        "3 interactions (last seq 3), 0 summaries, 0 facts, 0 open dead letters;"
        f" schema version {len(MIGRATIONS)}, integrity ok, "
    )
    assert [p.name for p in short_tmp.iterdir() if p.name.startswith(".")] == []


def test_backup_never_overwrites_the_database(short_tmp: Path) -> None:
    """Naming the database itself as the backup file is refused."""
    store = _database(short_tmp)
    with pytest.raises(BackupError, match=r"forged\.db is the database itself; back up to another"):
        take_backup(store, Path(store.path))
    assert _ids(Path(store.path)) == {"id-0", "id-1", "id-2"}


def test_backup_of_a_missing_database_says_so(short_tmp: Path) -> None:
    """A wrong database path is one line, and no empty database is created there."""
    store = StoreConfig(path=str(short_tmp / "nope.db"))
    with pytest.raises(BackupError, match=r"^cannot open the database .*nope\.db: unable to open"):
        take_backup(store, short_tmp / "b.db")
    assert not (short_tmp / "nope.db").exists() and not (short_tmp / "b.db").exists()


async def test_restore_refuses_while_the_daemon_runs(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """With a daemon on the database, restore changes nothing and says what to do."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    backup = short_tmp / "b.db"
    other = await trio.to_thread.run_sync(_database, short_tmp / "other")
    await trio.to_thread.run_sync(take_backup, other, backup)
    async with running_daemon(config):
        with pytest.raises(BackupError) as info:
            restore_backup(backup, config.store.path, replace=True)
    assert str(info.value) == (
        f"forged is running on {config.store.path} (or on another database in its directory);"
        " stop it first (Ctrl-C the `forged serve` or `make run` serving it)"
    )
    assert _ids(Path(config.store.path)) == set()


def test_a_daemon_does_not_start_during_a_restore(short_tmp: Path) -> None:
    """`forged serve` on a database being restored exits at once with one line."""
    database = str(short_tmp / "forged.db")
    config = short_tmp / "forged.toml"
    config.write_text(f"[server]\nsocket = '{short_tmp}/s.sock'\n[store]\npath = '{database}'\n")
    held = _exclusive(database)  # what restore holds while it works
    try:
        command = [sys.executable, "-m", "forged", "serve", "--config", str(config)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    finally:
        os.close(held)
    assert (done.returncode, done.stderr) == (
        1,
        f"forged: {database} is being restored; start forged when that is done\n",
    )
    DatabaseLock(database).release()  # and once it is done, it may


def test_a_restore_removes_the_turn_index_before_a_daemon_may_start(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replaced database's turn index goes while the restore still holds the lock: a
    daemon started as the lock went opened the old index, of other turns under the same seqs."""
    backup, index = short_tmp / "b.db", short_tmp / "forged.db.index"
    take_backup(_database(short_tmp / "old", interactions=2), backup)
    live = _database(short_tmp, interactions=5)
    index.mkdir()
    started: list[str] = []

    def removed(path: Path, ignore_errors: bool) -> None:
        try:
            DatabaseLock(live.path).release()
            started.append("a daemon started")
        except StoreError as exc:
            started.append(str(exc))
        path.rmdir()

    monkeypatch.setattr(backup_module.shutil, "rmtree", removed)
    restore_backup(backup, live.path, replace=True, derived=index)
    assert started == [f"{live.path} is being restored; start forged when that is done"]
    assert not index.exists()


def test_restore_replaces_only_when_told(short_tmp: Path) -> None:
    """An existing database needs --yes; the old one's WAL is not replayed onto the new."""
    backup = short_tmp / "b.db"
    take_backup(_database(short_tmp / "old", interactions=2), backup)
    live = _database(short_tmp, interactions=5)
    with pytest.raises(BackupError, match=r"exists; pass --yes to replace it with"):
        restore_backup(backup, live.path, replace=False)
    Path(f"{live.path}-wal").write_bytes(b"stale frames of the old database")
    restore_backup(backup, live.path, replace=True)
    assert _ids(Path(live.path)) == {"id-0", "id-1"}
    assert stat.S_IMODE(Path(live.path).stat().st_mode) == 0o600


def _damaged(path: Path) -> None:
    data = bytearray(path.read_bytes())
    page = 4096
    data[2 * page : 3 * page] = b"\xff" * page  # a b-tree page overwritten
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("prepare", "message"),
    [
        (lambda p: p.write_text("not a database at all" * 100), "not a usable SQLite database"),
        (_damaged, "damaged|not a usable SQLite database"),
        (
            lambda p: sqlite3.connect(p).execute("CREATE TABLE t (x)").connection.commit(),
            "not a forged database",
        ),
    ],
    ids=["not-sqlite", "damaged", "not-forged"],
)
def test_restore_checks_the_file_first(
    short_tmp: Path, prepare: Callable[[Path], object], message: str
) -> None:
    """A file that is not a sound forged database is refused before anything is touched."""
    backup = short_tmp / "b.db"
    take_backup(_database(short_tmp / "src", interactions=50), backup)
    if "forged" in message:
        backup.unlink()
    prepare(backup)
    live = _database(short_tmp, interactions=1)
    with pytest.raises(BackupError, match=rf"^{backup}: ({message})"):
        restore_backup(backup, live.path, replace=True)
    assert _ids(Path(live.path)) == {"id-0"}


def test_restore_refuses_a_newer_schema(short_tmp: Path) -> None:
    """A backup from a newer forged is named as such."""
    backup = short_tmp / "b.db"
    take_backup(_database(short_tmp / "src"), backup)
    with sqlite3.connect(backup) as db:
        db.execute(
            "INSERT INTO schema_migrations VALUES (?, 'future', 'x')", (len(MIGRATIONS) + 1,)
        )
    known = len(MIGRATIONS)
    with pytest.raises(
        BackupError,
        match=rf"schema version {known + 1} is newer than this forged knows \({known}\)",
    ):
        inspect_backup(backup)


def test_backup_and_restore_commands(short_tmp: Path) -> None:
    """`forged backup` and `forged restore` print what the file holds; a refusal is one line."""
    store = _database(short_tmp / "live", interactions=4)
    config = short_tmp / "forged.toml"
    config.write_text(f"[store]\npath = '{store.path}'\n")

    def forged(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "forged", *args, "--config", str(config)]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    backup = short_tmp / "b.db"
    done = forged("backup", str(backup))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"backed up to {backup}: 4 interactions (last seq 4),")
    refused = forged("restore", str(backup))
    assert (refused.returncode, refused.stderr) == (
        1,
        f"forged: {store.path} exists; pass --yes to replace it with {backup}\n",
    )
    index = Path(store.path + ".index")  # the turn index of the database replaced
    index.mkdir()
    (index / "meta.json").write_text("{}")
    done = forged("restore", str(backup), "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"restored {backup} into {store.path}: 4 interactions")
    assert not index.exists()  # rebuilt from the restored store when the daemon starts


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "-journal", ".lock", ".old"])
def test_backup_refuses_every_file_of_the_database(short_tmp: Path, suffix: str) -> None:
    """The database, its WAL, shared memory, journal, lock or any `DB*` beside it is never a
    backup target: writing there loses what the daemon acknowledged."""
    store = _database(short_tmp)
    target = Path(f"{store.path}{suffix}")
    what = "the database itself" if not suffix else "a file of forged.db"
    with pytest.raises(BackupError, match=rf"^{target} is {what}; back up to another file$"):
        take_backup(store, target)
    assert _ids(Path(store.path)) == {"id-0", "id-1", "id-2"}


def test_backup_refuses_a_link_to_a_file_of_the_database(short_tmp: Path) -> None:
    """Another name for the database's WAL (a hard link elsewhere) is refused as well."""
    store = _database(short_tmp)
    wal = Path(f"{store.path}-wal")
    wal.write_bytes(b"")
    (short_tmp / "elsewhere").mkdir()
    link = short_tmp / "elsewhere" / "b.db"
    os.link(wal, link)
    with pytest.raises(BackupError, match=r"b\.db is a file of the database .*forged\.db; back"):
        take_backup(store, link)


def test_restore_refuses_a_file_of_the_database_as_its_source(short_tmp: Path) -> None:
    """`forged restore DB-wal` is refused before anything is touched."""
    store = _database(short_tmp)
    wal = f"{store.path}-wal"
    Path(wal).write_bytes(b"")
    with pytest.raises(BackupError, match=rf"^{wal} is a file of forged\.db; restore from another"):
        restore_backup(Path(wal), store.path, replace=True)


async def test_a_lock_file_replaced_under_the_daemon_does_not_let_restore_in(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """The daemon's claim is on the database's directory: whatever file is put in place of
    `DB.lock` (or any other), restore still finds the daemon and changes nothing."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    backup = short_tmp / "b.db"
    other = await trio.to_thread.run_sync(_database, short_tmp / "other")
    await trio.to_thread.run_sync(take_backup, other, backup)
    async with running_daemon(config):
        replacement = short_tmp / "lock.new"
        replacement.write_bytes(b"")
        os.replace(replacement, f"{config.store.path}.lock")
        with pytest.raises(BackupError, match=r"^forged is running on "):
            restore_backup(backup, config.store.path, replace=True)
    assert _ids(Path(config.store.path)) == set()


def test_restore_creates_no_directory(short_tmp: Path) -> None:
    """A database path in a directory that does not exist is a wrong path: refused, not made."""
    backup = short_tmp / "b.db"
    take_backup(_database(short_tmp / "src"), backup)
    database = short_tmp / "var" / "lib" / "forged" / "forged.db"
    with pytest.raises(
        BackupError,
        match=(
            rf"^{database.parent} does not exist: is {database} the database forged serves\?"
            r" Name its configuration with --config$"
        ),
    ):
        restore_backup(backup, str(database), replace=True)
    assert not (short_tmp / "var").exists()


def test_the_packaged_daemon_is_stopped_with_systemctl() -> None:
    """The hint names systemctl only for the systemd unit's database."""
    assert _how_to_stop("/var/lib/forged/forged.db") == "systemctl stop forged forged.socket"
    assert _how_to_stop("./var/forged.db") == "Ctrl-C the `forged serve` or `make run` serving it"


def test_backup_into_a_directory_writes_a_dated_file_in_it(short_tmp: Path) -> None:
    """`forged backup dir` writes `dir/forged-<time>.db`; `dir/` that does not exist is refused."""
    store = _database(short_tmp)
    backups = short_tmp / "backups"
    backups.mkdir()
    take_backup(store, backups)
    (written,) = backups.iterdir()
    assert re.fullmatch(r"forged-\d{8}T\d{6}Z\.db", written.name), written.name
    assert _ids(written) == {"id-0", "id-1", "id-2"}
    with pytest.raises(BackupError, match=r"^.*missing/ is not a directory; create it first"):
        take_backup(store, f"{short_tmp}/missing/")
    assert not (short_tmp / "missing").exists()


def _crafted(path: Path) -> None:
    """A file with every migration recorded but only a few bare tables."""
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT,"
            " applied_at TEXT)"
        )
        for version in range(1, len(MIGRATIONS) + 1):
            db.execute("INSERT INTO schema_migrations VALUES (?, 'x', 'x')", (version,))
        for table in (
            "interactions (seq, client_id)",
            "summaries (id)",
            "facts (id)",
            "dead_letters (resolved_at)",
        ):
            db.execute(f"CREATE TABLE {table}")


def test_restore_checks_the_schema_itself(short_tmp: Path) -> None:
    """Migration numbers alone do not pass: the tables, indexes, views and triggers must be the
    ones the migrations make, or the daemon would refuse to start on the restored file."""
    crafted = short_tmp / "crafted.db"
    _crafted(crafted)
    live = _database(short_tmp)
    with pytest.raises(
        BackupError,
        match=(
            rf"^{crafted}: not the schema version {len(MIGRATIONS)} makes: no index "
            r"consolidation_changes_by_fact; no index consolidation_changes_by_into; no index"
            r" consolidation_runs_by_observer and \d+ more$"
        ),
    ):
        restore_backup(crafted, live.path, replace=True)
    assert _ids(Path(live.path)) == {"id-0", "id-1", "id-2"}


def test_a_changed_table_is_not_the_schema(short_tmp: Path) -> None:
    """A real database with one trigger dropped is refused, naming the trigger."""
    store = _database(short_tmp / "src")
    with sqlite3.connect(store.path) as db:
        db.execute("DROP TRIGGER facts_fts_insert")
    with pytest.raises(BackupError, match=r"makes: no trigger facts_fts_insert$"):
        inspect_backup(Path(store.path))


@pytest.mark.skipif(DEFAULT_CONFIG_PATH.exists(), reason="a system configuration is in force")
def test_commands_in_a_checkout_use_the_database_make_run_serves(short_tmp: Path) -> None:
    """Without --config, in a source checkout, backup, restore and check-config use the dev
    configuration's database, as the other commands use its socket; no system path is touched."""
    (short_tmp / "config").mkdir()
    (short_tmp / "config" / "forged.dev.toml").write_text(
        '[server]\nsocket = "./var/run/forged.sock"\n[store]\npath = "./var/forged.db"\n'
    )
    database = short_tmp / "var" / "forged.db"
    _database(short_tmp / "var", interactions=4)
    env = {k: v for k, v in os.environ.items() if k not in ("FORGED_CONFIG", "FORGED_SOCKET")}

    def forged(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "forged", *args],
            cwd=short_tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    done = forged("backup", "b.db")
    assert done.stdout.startswith("backed up to b.db: 4 interactions"), done.stderr
    done = forged("restore", "--yes", "b.db")
    assert done.stdout.startswith(f"restored b.db into {database}: 4 interactions"), done.stderr
    done = forged("check-config")
    assert f"# store: sqlite at {database}, schema version" in done.stdout, done.stderr
    assert "config/forged.dev.toml (what `make run` serves with)" in done.stdout
