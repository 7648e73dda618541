"""Backup and restore: a consistent copy of the live database, checked, and put back safely.

`take_backup` copies one snapshot through SQLite's online backup API inside a single read
transaction: in WAL mode the daemon keeps accepting while it runs, and everything committed
before it began is in the copy. The copy is checked (integrity, schema version, the same counts
as the snapshot) before it replaces the target. `restore_backup` checks the file the same way and
puts it in place only while no daemon holds the database: an open `Store` holds a shared lock on
`DATABASE.lock`, and restore takes it exclusively.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from contextlib import closing, suppress
from pathlib import Path

import msgspec

from forged.config import StoreConfig
from forged.errors import BackupError, StoreError
from forged.schema import MIGRATIONS

FILE_MODE = 0o600  # a backup is memory: readable by its owner alone
LOCK_MODE = 0o644  # the lock file holds nothing; one made by a root restore stays usable
INTEGRITY_ERRORS = 5  # problems integrity_check reports at most
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


def _lock_file(database: str) -> int:
    path = f"{database}.lock"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, LOCK_MODE)


class DatabaseLock:
    """An open store's claim on its database: shared, so only a restore (exclusive) conflicts."""

    def __init__(self, database: str) -> None:
        self._fd = _lock_file(database)
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
        raise BackupError(f"{path}: schema version {len(versions)} is newer than this forged"
                          f" knows ({len(MIGRATIONS)}); upgrade forged")  # fmt: skip
    return len(versions)


def inspect_backup(path: Path) -> BackupInfo:
    """Check a database file (integrity, schema version) and count what it holds."""
    if not path.is_file():
        raise BackupError(f"{path}: no such file")
    try:
        with closing(sqlite3.connect(_read_only(path), uri=True)) as conn:
            problems = [p for (p,) in conn.execute(f"PRAGMA integrity_check({INTEGRITY_ERRORS})")]
            if problems != ["ok"]:
                raise BackupError(f"{path}: damaged: {'; '.join(problems)}")
            version = _schema_version(conn, path)
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
        source = sqlite3.connect(uri, uri=True, isolation_level=None,
                                 timeout=store.busy_timeout_ms / 1000)  # fmt: skip
    except sqlite3.OperationalError as exc:
        raise BackupError(f"cannot open the database {store.path}: {exc}") from exc
    with closing(source):
        source.execute("BEGIN")  # the counts and the copy read the same snapshot
        counts = _counts(source)
        _copy_into(source, partial)
        source.execute("COMMIT")
    return counts


def take_backup(store: StoreConfig, target: Path) -> BackupInfo:
    """Copy the live database to `target` (mode 0600) without stopping ingest, checked."""
    if target.exists() and Path(store.path).exists() and target.samefile(store.path):
        raise BackupError(f"{target} is the database itself; back up to another file")
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


def _exclusive(database: str) -> int:
    """The lock no daemon may hold meanwhile; refuse while one runs."""
    fd = _lock_file(database)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise BackupError(f"forged is running on {database}; stop it first"
                          " (systemctl stop forged forged.socket)") from None  # fmt: skip
    return fd


def restore_backup(backup: Path, database: str, *, replace: bool) -> BackupInfo:
    """Put a checked backup in place of the database while no daemon runs."""
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
            with closing(sqlite3.connect(_read_only(backup), uri=True)) as source:
                _copy_into(source, partial)
            if _counts_of(inspect_backup(partial)) != _counts_of(info):
                raise BackupError(f"the copy of {backup} does not hold what the file holds")
            if os.geteuid() == 0:  # run as root: the daemon's user must still own its database
                owner = (target if target.exists() else target.parent).stat()
                os.chown(partial, owner.st_uid, owner.st_gid)
            for stale in ("-wal", "-shm", "-journal"):  # the old database's, never the new one's
                with suppress(FileNotFoundError):
                    os.unlink(f"{database}{stale}")
            _sync_into_place(partial, target)
        except (OSError, sqlite3.Error) as exc:
            raise BackupError(f"cannot write {database}: {_reason(exc)}") from exc
        finally:
            partial.unlink(missing_ok=True)
    finally:
        os.close(fd)
    return info
