"""Backup and restore: a consistent copy of the live database, checked, and put back safely.

`take_backup` copies one snapshot through SQLite's online backup API inside a single read
transaction: in WAL mode the daemon keeps accepting while it runs, and everything committed
before it began is in the copy. The copy is checked (integrity, schema version, the same counts
as the snapshot) before it replaces the target. `restore_backup` checks the file the same way,
then trusts nothing of it but its rows: they are copied into a freshly created schema, whose
triggers index them anew (forged.store.rebuild), and that copy is put in place only while no
daemon holds the database: an open `Store` holds a shared lock on
the database's directory, and restore takes it exclusively. The lock is on the directory, not on
a file beside the database, so no file written or replaced there can fool it; and no backup is
ever written onto the database or a file of its (`-wal`, `-shm`, `-journal`, any `DB*` beside it).
A file to restore must hold the very schema the migrations make, not only their numbers: every
trigger and view is compared, whatever its name (none of forged's starts with `sqlite_`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
from contextlib import closing, suppress
from pathlib import Path

import msgspec

from forged.config import DEFAULT_DATABASE, StoreConfig
from forged.errors import BackupError, StoreError
from forged.store.rebuild import rebuild_from, untrusted
from forged.store.sqlite_schema import MIGRATIONS, register_functions
from forged.timestamps import now

__all__ = [
    "FILE_MODE",
    "INTEGRITY_ERRORS",
    "BackupInfo",
    "DatabaseLock",
    "inspect_backup",
    "restore_backup",
    "take_backup",
]

FILE_MODE = 0o600  # a backup is memory: readable by its owner alone
INTEGRITY_ERRORS = 5  # problems integrity_check reports at most
SCHEMA_DIFFERENCES = 3  # schema differences a refusal names at most
SYSTEMD_STOP = "systemctl stop forged forged.socket"  # how the packaged daemon is stopped
DEV_STOP = "Ctrl-C the `forged serve` or `make run` serving it"  # a daemon started by hand
# What the migrations make: everything but their record and the planner's statistics (tables
# ANALYZE may add, which nothing runs). SQLite's own sqlite_sequence and automatic indexes are
# compared too: the migrations make the same ones.
_SCHEMA = """SELECT type, name, sql FROM sqlite_master WHERE name != 'schema_migrations'
    AND NOT (type = 'table' AND name IN ('sqlite_stat1', 'sqlite_stat4'))"""
_COUNTS = """
    SELECT (SELECT count(*) FROM interactions), (SELECT coalesce(max(seq), 0) FROM interactions),
           (SELECT count(*) FROM summaries), (SELECT count(*) FROM facts),
           (SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL)
"""


class BackupInfo(msgspec.Struct, frozen=True):
    """What a database file holds, once checked."""

    schema_version: int
    interactions: int
    last_seq: int
    summaries: int
    facts: int
    open_dead_letters: int
    size_bytes: int

    def describe(self) -> str:
        """One line for people: what the file holds and that it passed its checks."""
        return (
            f"{self.interactions} interactions (last seq {self.last_seq}), {self.summaries}"
            f" summaries, {self.facts} facts, {self.open_dead_letters} open dead letters;"
            f" schema version {self.schema_version}, integrity ok,"
            f" {self.size_bytes / 1e6:.1f} MB"
        )


def _directory(database: str) -> int:
    """The database's directory, opened to lock: a directory no file can be put in place of."""
    directory = Path(database).absolute().parent
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BackupError(
            f"{directory} does not exist: is {database} the database forged"
            " serves? Name its configuration with --config"
        ) from None


class DatabaseLock:
    """An open store's claim on its database: shared, so only a restore (exclusive) conflicts."""

    def __init__(self, database: str) -> None:
        self._fd = _directory(database)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise StoreError(
                f"{database} is being restored; start forged when that is done"
            ) from None

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _reason(exc: OSError | sqlite3.Error) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


def _read_only(path: Path) -> str:
    """The SQLite URI opening `path` read-only (percent-encoded: any file name works)."""
    return f"{path.resolve().as_uri()}?mode=ro"


def _counts(conn: sqlite3.Connection) -> tuple[int, ...]:
    return tuple(conn.execute(_COUNTS).fetchone())


def _schema_version(conn: sqlite3.Connection, path: Path) -> int:
    try:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_migrations")]
    except sqlite3.OperationalError:
        raise BackupError(f"{path}: not a forged database (it has no schema_migrations)") from None
    if sorted(versions) != list(range(1, len(versions) + 1)):
        raise BackupError(f"{path}: schema_migrations is inconsistent: versions {versions}")
    if len(versions) > len(MIGRATIONS):
        raise BackupError(
            f"{path}: schema version {len(versions)} is newer than this forged"
            f" knows ({len(MIGRATIONS)}); upgrade forged"
        )
    return len(versions)


def _normal(sql: str | None) -> str:
    return " ".join((sql or "").split())


def _expected_schema(version: int) -> list[tuple[str, str, str]]:
    """What the first `version` migrations make in an empty database."""
    with closing(sqlite3.connect(":memory:", isolation_level=None)) as conn:
        register_functions(conn)
        for _name, sql in MIGRATIONS[:version]:
            conn.executescript(sql)
        return [(t, n, _normal(q)) for t, n, q in conn.execute(_SCHEMA)]


def _check_schema(conn: sqlite3.Connection, path: Path, version: int) -> None:
    """Refuse a file whose tables, indexes, views and triggers are not what `version` makes."""
    wanted = {(t, n): q for t, n, q in _expected_schema(version)}
    have = {(t, n): _normal(q) for t, n, q in conn.execute(_SCHEMA)}
    problems = [f"no {t} {n}" for t, n in sorted(wanted.keys() - have.keys())]
    problems += [
        f"{t} {n} differs"
        for t, n in sorted(wanted.keys() & have.keys())
        if wanted[t, n] != have[t, n]
    ]
    problems += [f"an unknown {t} {n}" for t, n in sorted(have.keys() - wanted.keys())]
    if problems:
        shown = "; ".join(problems[:SCHEMA_DIFFERENCES])
        more = len(problems) - SCHEMA_DIFFERENCES
        shown += f" and {more} more" if more > 0 else ""
        raise BackupError(f"{path}: not the schema version {version} makes: {shown}")


def inspect_backup(path: Path) -> BackupInfo:
    """Check a database file (integrity, schema version) and count what it holds."""
    if not path.is_file():
        raise BackupError(f"{path}: no such file")
    try:
        with closing(untrusted(path)) as conn:
            problems = [p for (p,) in conn.execute(f"PRAGMA integrity_check({INTEGRITY_ERRORS})")]
            if problems != ["ok"]:
                raise BackupError(f"{path}: damaged: {'; '.join(problems)}")
            version = _schema_version(conn, path)
            _check_schema(conn, path, version)
            interactions, last_seq, summaries, facts, dead_letters = _counts(conn)
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{path}: not a usable SQLite database: {exc}") from exc
    size = path.stat().st_size
    return BackupInfo(version, interactions, last_seq, summaries, facts, dead_letters, size)


def _create_private(path: Path) -> None:
    """An empty file only the owner can read, replacing any left by an interrupted run."""
    path.unlink(missing_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE))


def _sync_into_place(partial: Path, target: Path) -> None:
    """Make `partial` durable, then atomically take `target`'s name."""
    with open(partial, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(partial, target)
    directory = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _copy_into(source: sqlite3.Connection, partial: Path) -> None:
    """Copy the database through SQLite (pages in a WAL included) into one self-contained file."""
    with closing(sqlite3.connect(partial, isolation_level=None)) as copy:
        source.backup(copy)  # in one step (pages=-1): the snapshot cannot move under it
        copy.execute("PRAGMA journal_mode = DELETE")  # no -wal beside it


def _copy_snapshot(store: StoreConfig, partial: Path) -> tuple[int, ...]:
    """Copy one snapshot of the live database into `partial`; its counts, read in that snapshot."""
    uri = _read_only(Path(store.path))
    try:
        source = sqlite3.connect(
            uri, uri=True, isolation_level=None, timeout=store.busy_timeout_ms / 1000
        )
    except sqlite3.OperationalError as exc:
        raise BackupError(
            f"cannot open the database {store.path}: {exc}; is it the database"
            " forged serves? Name its configuration with --config"
        ) from exc
    with closing(source):
        source.execute("BEGIN")  # the counts and the copy read the same snapshot
        counts = _counts(source)
        _copy_into(source, partial)
        source.execute("COMMIT")
    return counts


def _companions(database: str) -> list[Path]:
    """The database and every file beside it whose name starts with the database's."""
    path = Path(database).absolute()
    if not path.parent.is_dir():
        return []
    return [p for p in path.parent.iterdir() if p.name.startswith(path.name)]


def _refuse_companion(path: Path, database: str, role: str) -> None:
    """Refuse `path` when it is the database or one of its files (`-wal`, `-shm`, `.lock`...),
    by name or as the same file under another name (a link)."""
    db = Path(database).absolute()
    resolved = Path(os.path.realpath(path))
    same_dir = resolved.parent == Path(os.path.realpath(db.parent))
    if same_dir and resolved.name.startswith(db.name):
        what = "the database itself" if resolved.name == db.name else f"a file of {db.name}"
        raise BackupError(f"{path} is {what}; {role} another file")
    if path.exists() and any(path.samefile(c) for c in _companions(database) if c.exists()):
        raise BackupError(f"{path} is a file of the database {database}; {role} another file")


def backup_target(target: str | Path) -> Path:
    """The file a backup to `target` writes: `target`, or a new dated file in a directory."""
    if (path := Path(target)).is_dir():
        stamp = now().replace(":", "").replace("-", "").split(".")[0]  # 20261202T051000
        return path / f"forged-{stamp}Z.db"
    if str(target).endswith(os.sep):  # `dir/` means a directory, which a file must not replace
        raise BackupError(f"{target} is not a directory; create it first or name a file")
    return path


def take_backup(store: StoreConfig, target: str | Path) -> BackupInfo:
    """Copy the live database to `target` (mode 0600) without stopping ingest, checked."""
    target = backup_target(target)
    _refuse_companion(target, store.path, "back up to")
    partial = target.with_name(f".{target.name}.partial")
    try:
        _create_private(partial)
        expected = _copy_snapshot(store, partial)
        info = inspect_backup(partial)
        if _counts_of(info) != expected:
            raise BackupError(f"the copy holds {_counts_of(info)}, the database held {expected}")
        _sync_into_place(partial, target)
    except (OSError, sqlite3.Error) as exc:
        raise BackupError(f"cannot write {target}: {_reason(exc)}") from exc
    finally:
        partial.unlink(missing_ok=True)
    return info


def _counts_of(info: BackupInfo) -> tuple[int, ...]:
    return (info.interactions, info.last_seq, info.summaries, info.facts, info.open_dead_letters)


def _how_to_stop(database: str) -> str:
    """The packaged daemon runs under systemd; any other was started by hand or `make run`."""
    return SYSTEMD_STOP if os.path.realpath(database) == DEFAULT_DATABASE else DEV_STOP


def _exclusive(database: str) -> int:
    """The lock no daemon may hold meanwhile; refuse while one runs."""
    fd = _directory(database)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise BackupError(
            f"forged is running on {database} (or on another database in its"
            f" directory); stop it first ({_how_to_stop(database)})"
        ) from None
    return fd


def restore_backup(
    backup: Path, database: str, *, replace: bool, derived: Path | None = None
) -> BackupInfo:
    """Put the rows of a checked backup, in a fresh schema, in place of the database while no
    daemon runs; `derived` (the turn index, rebuilt from the database at start) is removed
    before a daemon may start: one started as the lock went would open the old one."""
    _refuse_companion(backup, database, "restore from")
    info = inspect_backup(backup)
    target = Path(database)
    fd = _exclusive(database)
    try:
        if target.exists() and not replace:
            raise BackupError(f"{database} exists; pass --yes to replace it with {backup}")
        if target.exists() and target.samefile(backup):
            raise BackupError(f"{backup} is the database itself")
        partial = target.with_name(f".{target.name}.restoring")
        try:
            _create_private(partial)
            with closing(untrusted(backup)) as source:
                rebuild_from(source, partial, info.schema_version, backup)
            if _counts_of(inspect_backup(partial)) != _counts_of(info):
                raise BackupError(f"the copy of {backup} does not hold what the file holds")
            if os.geteuid() == 0:  # run as root: the daemon's user must still own its database
                owner = (target if target.exists() else target.parent).stat()
                os.chown(partial, owner.st_uid, owner.st_gid)
            for stale in ("-wal", "-shm", "-journal"):  # the old database's, never the new one's
                with suppress(FileNotFoundError):
                    os.unlink(f"{database}{stale}")
            _sync_into_place(partial, target)
            if derived is not None:
                shutil.rmtree(derived, ignore_errors=True)
        except (OSError, sqlite3.Error) as exc:
            raise BackupError(f"cannot write {database}: {_reason(exc)}") from exc
        finally:
            partial.unlink(missing_ok=True)
    finally:
        os.close(fd)
    return info
