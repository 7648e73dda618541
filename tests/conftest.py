"""Shared fixtures: the fake LLM and a short temporary directory (daemons are in tests/support/daemons.py)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trio

from forged.config import Config, StoreConfig, cache_directory, load_config
from forged.scrub import scan as scrub
from forged.store.backend import Backend
from forged.store.backend import open_store as open_store_of
from tests.support import daemons
from tests.support.daemons import running_daemon, write_config
from tests.support.fakellm import FakeLLM
from tests.support.observers import Recorder
from tests.support.postgres import THROWAWAY, Server, binaries, postgres_server
from tests.support.profiles import register_profiles

RAM_DISK = Path("/dev/shm")
RAM_DISK_FREE = 1 << 30  # bytes it must have free (the 200,000-interaction backlog takes 100 MiB)


def _temporary_files_in_ram() -> None:
    """Temporary directories (the daemons' SQLite files and sockets, the PostgreSQL server's
    data) in RAM when the machine has room, where a sync costs nothing, as the PostgreSQL
    server's `fsync=off` (tests/support/postgres.py): the tests check the daemon's logic and that a
    killed process loses nothing, which the page cache keeps either way; a power cut is not
    tested. A fresh SQLite store opens in 0.02 s there, 0.1 s on disk."""
    if os.access(RAM_DISK, os.W_OK) and shutil.disk_usage(RAM_DISK).free >= RAM_DISK_FREE:
        tempfile.tempdir = str(RAM_DISK)  # pytest's tmp_path too: it asks tempfile


def _cache_of_this_run() -> None:
    """The daemons' cache (the scrubber's compiled prefilter) in a temporary directory of this
    run, removed at its end: the tests write nothing in the user's cache. The run's first
    process compiles the prefilter into it once; xdist's workers, which it starts, and every
    daemon they start inherit the variable and read it back."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        return  # the process that started this worker chose the directory
    os.environ.pop("CACHE_DIRECTORY", None)  # a service manager's, which would come first
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="fgcache")
    atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], ignore_errors=True)


_temporary_files_in_ram()
_cache_of_this_run()
register_profiles()  # before the hypothesis plugin loads the one `--hypothesis-profile` names
scrub.prepare(cache_directory(os.environ))  # as `forged serve` does, not in a test's first push

# A test that asks for one of these starts a daemon or a server: `make check` leaves it out.
INTEGRATION_FIXTURES = frozenset({"fake_llm", "short_tmp", "daemon", "sock_dir", "llm"})
BACKENDS = ("sqlite", "postgresql")  # every test that starts a daemon runs on each
LONG_MARKERS = ("slow", "model")  # tests that take many seconds


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `integration` every test that starts a daemon or a server (by the fixtures it uses),
    and put the long ones first: spread over cores (`make test`), none is left running alone
    at the end.

    Tests that start child processes without such a fixture carry the mark themselves.
    """
    items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in LONG_MARKERS))
    for item in items:
        if INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("store_backend") == "postgresql":
            item.add_marker(pytest.mark.integration)  # it starts a PostgreSQL server


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that starts a daemon once per store backend."""
    if "store_backend" in metafunc.fixturenames:
        metafunc.parametrize("store_backend", BACKENDS, indirect=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Server]:
    """A PostgreSQL server for the whole session; the test is skipped without the binaries."""
    if binaries() is None:
        pytest.skip("no PostgreSQL binaries (initdb, pg_ctl) on this machine")
    with postgres_server(THROWAWAY) as server:
        yield server


@pytest.fixture(scope="session")
def migrated_template(postgres: Server) -> str:
    """The name of a database migrated once, which the tests on PostgreSQL get copies of.

    Their daemons then find the schema a first start would have made, without migrating again;
    the migrations themselves still run here, and on the empty databases of store/test_postgres.py's
    shared daemons and of check-config's test.
    """
    url = postgres.new_database()
    open_store_of(StoreConfig(url=url)).close()
    return urlsplit(url).path.lstrip("/")


@pytest.fixture
def store_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The store the test's daemons use: SQLite, or an empty migrated PostgreSQL database."""
    backend: str = request.param
    if backend == "postgresql":
        if request.node.get_closest_marker("sqlite_only"):
            pytest.skip("tests a property of the SQLite file")
        server: Server = request.getfixturevalue("postgres")
        daemons.STORE_URL = server.empty_database(request.getfixturevalue("migrated_template"))
    try:
        yield backend
    finally:
        if daemons.STORE_URL:
            server.give_back(daemons.STORE_URL)
        daemons.STORE_URL = None


StoreOpener = Callable[[], Backend]  # opens the test's database (again, after a close)


@pytest.fixture
def open_store(store_backend: str, tmp_path: Path) -> StoreOpener:
    """Opens the test's store: a SQLite file, or its PostgreSQL database."""
    config = StoreConfig(path=str(tmp_path / "f.db"), url=daemons.STORE_URL or "")
    return lambda: open_store_of(config)


@pytest.fixture
def short_tmp(store_backend: str) -> Iterator[Path]:
    """A short temporary directory: Unix socket paths must stay under 108 bytes."""
    with tempfile.TemporaryDirectory(prefix="fg") as path:
        yield Path(path)


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for socket paths, for a test that uses no store (or SQLite by itself):
    unlike `short_tmp`, it runs once, not once per store."""
    with tempfile.TemporaryDirectory(prefix="fg") as path:
        yield Path(path)


@pytest.fixture
async def fake_llm(nursery: trio.Nursery) -> FakeLLM:
    """The fake OpenAI-compatible server, listening on loopback."""
    llm = FakeLLM()
    await nursery.start(llm.serve)
    return llm


@pytest.fixture
def recorder() -> Iterator[type[Recorder]]:
    """The recording plugin, reset: nothing seen, held back until the test sets its gate."""
    Recorder.seen, Recorder.gate, Recorder.fail_once_at, Recorder.lives = [], trio.Event(), None, 0
    yield Recorder


@pytest.fixture
async def daemon(short_tmp: Path, fake_llm: FakeLLM) -> AsyncIterator[Config]:
    """A daemon in this process on the test config, distilling with the fake LLM: its config."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(60):
        async with running_daemon(config):
            yield config
