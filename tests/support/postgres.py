"""A real PostgreSQL server for tests and benchmarks, from the machine's binaries, on a Unix socket.

PostgreSQL refuses to run as root: as root, the server runs as the `postgres` system user in a
directory that user owns.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

START_TIMEOUT = 60  # seconds pg_ctl waits for the server to accept connections
SERVER_USER = "postgres"  # the system user the server runs as when we are root
# The tests' throwaway server writes without flushing: what the tests check is the daemon's
# durability, and a daemon killed mid-write loses nothing the server has acknowledged, since the
# server itself lives on (its own crash is not tested). The benchmarks keep the defaults.
THROWAWAY = ("fsync=off", "full_page_writes=off")
_databases = itertools.count(1)


def binaries() -> Path | None:
    """The directory of initdb and pg_ctl: on PATH, else the newest Debian install."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    installed = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=_version)
    return Path(installed[-1]).parent if installed else None


def _version(path: str) -> int:
    return int(Path(path).parent.parent.name)


class Server:
    """A running PostgreSQL server: its socket directory, and fresh databases on demand."""

    def __init__(
        self, bin_dir: Path, directory: Path, as_user: list[str], settings: tuple[str, ...]
    ) -> None:
        self.bin_dir, self.directory, self._as_user = bin_dir, directory, as_user
        self.data = directory / "data"
        self._options = " ".join(f"-c {setting}" for setting in settings)
        self._emptied: list[str] = []  # databases given back, for `empty_database` to hand out

    def ctl(self, *args: str) -> None:
        """Run pg_ctl on this server (start, stop, restart)."""
        subprocess.run(
            [
                *self._as_user,
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.data),
                "-w",
                "-t",
                str(START_TIMEOUT),
                "-l",
                str(self.directory / "log"),
                "-o",
                f"-k {self.directory} -c listen_addresses='' -c max_connections=200 "
                f"{self._options}",
                *args,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SERVER_USER}@/{database}?host={self.directory}"

    def new_database(self, template: str = "template1") -> str:
        """The URL of a new database: empty, or a copy of `template` (a database's name)."""
        name = f"forged_{os.getpid()}_{next(_databases)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
        return self.url(name)

    def empty_database(self, template: str) -> str:
        """The URL of a database with `template`'s tables and no rows: one given back, or a copy."""
        return self.url(self._emptied.pop()) if self._emptied else self.new_database(template)

    def give_back(self, url: str) -> None:
        """Empty a database of `empty_database` for another test (in milliseconds; a copy takes
        half a second). One that someone is still connected to is not handed out again."""
        with psycopg.connect(url, autocommit=True) as conn:
            if conn.execute(_OTHERS).fetchone() != (0,):
                return
            tables = ", ".join(name for (name,) in conn.execute(_TABLES))
            conn.execute(f"TRUNCATE {tables} RESTART IDENTITY")
        self._emptied.append(urlsplit(url).path.lstrip("/"))


_OTHERS = """SELECT count(*) FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()"""
# Every table of the schema's rows; the migrations it records stay (the tests never change them).
_TABLES = """SELECT quote_ident(tablename) FROM pg_tables
    WHERE schemaname = 'public' AND tablename <> 'schema_migrations'"""


@contextmanager
def postgres_server(settings: tuple[str, ...] = ()) -> Iterator[Server]:
    """Start a server in a temporary directory; stop it and remove the directory at the end.

    `settings` are server settings (`name=value`) beyond the defaults."""
    bin_dir = binaries()
    if bin_dir is None:
        raise FileNotFoundError("no PostgreSQL binaries (initdb, pg_ctl) on this machine")
    as_user: list[str] = []
    directory = Path(tempfile.mkdtemp(prefix="fgpg"))
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", SERVER_USER, "--"]
        user = pwd.getpwnam(SERVER_USER)
        os.chown(directory, user.pw_uid, user.pw_gid)
    server = Server(bin_dir, directory, as_user, settings)
    try:
        subprocess.run(
            [
                *as_user,
                str(bin_dir / "initdb"),
                "-D",
                str(server.data),
                "-A",
                "trust",
                "-U",
                SERVER_USER,
                "--no-sync",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        server.ctl("start")
        try:
            yield server
        finally:
            server.ctl("stop", "-m", "immediate")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
