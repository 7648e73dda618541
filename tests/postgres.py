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

import psycopg

START_TIMEOUT = 60  # seconds pg_ctl waits for the server to accept connections
SERVER_USER = "postgres"  # the system user the server runs as when we are root
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

    def __init__(self, bin_dir: Path, directory: Path, as_user: list[str]) -> None:
        self.bin_dir, self.directory, self._as_user = bin_dir, directory, as_user
        self.data = directory / "data"

    def ctl(self, *args: str) -> None:
        """Run pg_ctl on this server (start, stop, restart)."""
        subprocess.run(
            [*self._as_user, str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-w",
             "-t", str(START_TIMEOUT), "-l", str(self.directory / "log"),
             "-o", f"-k {self.directory} -c listen_addresses='' -c max_connections=200", *args],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SERVER_USER}@/{database}?host={self.directory}"

    def new_database(self) -> str:
        """The URL of a new, empty database."""
        name = f"forged_{os.getpid()}_{next(_databases)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


@contextmanager
def postgres_server() -> Iterator[Server]:
    """Start a server in a temporary directory; stop it and remove the directory at the end."""
    bin_dir = binaries()
    if bin_dir is None:
        raise FileNotFoundError("no PostgreSQL binaries (initdb, pg_ctl) on this machine")
    as_user: list[str] = []
    directory = Path(tempfile.mkdtemp(prefix="fgpg"))
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", SERVER_USER, "--"]
        user = pwd.getpwnam(SERVER_USER)
        os.chown(directory, user.pw_uid, user.pw_gid)
    server = Server(bin_dir, directory, as_user)
    try:
        subprocess.run(
            [*as_user, str(bin_dir / "initdb"), "-D", str(server.data), "-A", "trust",
             "-U", SERVER_USER, "--no-sync"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        server.ctl("start")
        try:
            yield server
        finally:
            server.ctl("stop", "-m", "immediate")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
