"""The plugin API: observers and distillers are checked at start, with one line naming the fault."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from forged.config import DistillerConfig, load_config, parse_config
from forged.daemon.loader import (
    check_observers,
    load_consolidator,
    load_observers,
    make_distiller,
)
from forged.errors import ConfigError
from forged.store.sqlite import Store
from tests.support.daemons import running_daemon, socket_client, until, write_config
from tests.support.fakellm import FakeLLM
from tests.support.observers import Configured, Quitter
from tests.support.stub_consolidator import SamePrefix

ONE = {"messages": [{"role": "user", "text": "hello"}]}


@pytest.fixture
def store(sock_dir: Path) -> Iterator[Store]:
    """A SQLite store of its own (the plugins' tables are made the same way on PostgreSQL)."""
    store = Store(str(sock_dir / "forged.db"))
    yield store
    store.close()


def _load(toml: str, store: Store) -> list[object]:
    return list(load_observers(parse_config(toml), store))


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            "[observers.x]\nclass = 'tests.nope:Thing'",
            "observers.x.class: cannot import 'tests.nope': No module named 'tests.nope'",
        ),
        (
            "[observers.x]\nclass = 'tests.support.observers:Nope'",
            "observers.x.class: module 'tests.support.observers' has no 'Nope'",
        ),
        (
            "[observers.x]\nlimit = 3",
            "observers.x.class: missing; name the plugin as 'package.module:Class'",
        ),
        (
            "[observers.norun]\nclass = 'tests.support.observers:NoRun'",
            "observers.norun: tests.support.observers:NoRun has no async method `run`",
        ),
        (
            "[observers.blocking]\nclass = 'tests.support.observers:BlockingRun'",
            "observers.blocking: tests.support.observers:BlockingRun has no async method `run`",
        ),
        (
            "[observers.distill]\nclass = 'tests.support.observers:Recorder'",
            "observers.distill: 'distill' is the name of a built-in observer; choose another",
        ),
        (
            "[observers.recorder]\nclass = 'tests.support.observers:Recorder'\nlimit = 3",
            "observers.recorder.limit: unknown key (tests.support.observers:Recorder takes no settings)",
        ),
        (
            "[observers.cfg]\nclass = 'tests.support.observers:Configured'",
            "observers.cfg: object missing required field `label`",
        ),
        (
            "[observers.cfg]\nclass = 'tests.support.observers:Configured'\nlabel = 'a'\nlimt = 3",
            "observers.cfg.limt: unknown key",
        ),
        (
            "[observers.cfg]\nclass = 'tests.support.observers:Configured'\nlabel = 'a'\nlimit = 'x'",
            "observers.cfg.limit: expected `int`, got `str`",
        ),
    ],
)
def test_a_faulty_plugin_is_named_before_anything_runs(
    toml: str, message: str, store: Store
) -> None:
    """Import, method and settings faults are one config error naming the key, found at load."""
    with pytest.raises(ConfigError) as info:
        check_observers(parse_config(toml))
    assert str(info.value) == message
    with pytest.raises(ConfigError) as info:
        _load(toml, store)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            "[observers.n]\nclass = 'tests.support.observers:Nameless'",
            "observers.n: tests.support.observers:Nameless has no `name`; an observer takes its table's"
            " name (set `self.name = context.name`)",
        ),
        (
            "[observers.b]\nclass = 'tests.support.observers:Broken'",
            "observers.b: tests.support.observers:Broken failed to start:"
            " PermissionError: [Errno 13] Permission denied",
        ),
        (
            "[observers.other]\nclass = 'tests.support.observers:Recorder'",
            "observers.other: tests.support.observers:Recorder is named 'recorder'; an observer takes its"
            " table's name (set `self.name = context.name`)",
        ),
    ],
)
def test_an_observer_is_created_whole_with_its_tables_name(
    toml: str, message: str, store: Store
) -> None:
    """A plugin that cannot start, or ignores its table's name (its watermark key), is refused."""
    with pytest.raises(ConfigError) as info:
        _load(toml, store)
    assert str(info.value) == message


CONSOLIDATE = "[consolidate]\nenabled = true\n"


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            "class = 'tests.nope:Judge'",
            "consolidate.class: cannot import 'tests.nope': No module named 'tests.nope'",
        ),
        ("class = 'Judge'", "consolidate.class: 'Judge' is not of the form 'package.module:Name'"),
        (
            "class = 'tests.support.stub_consolidator:Blocking'",
            "consolidate.class: tests.support.stub_consolidator:Blocking has no async method `propose`",
        ),
        (
            "class = 'tests.support.stub_consolidator:Backwards'\n[consolidate.settings]\nwords = 2",
            "consolidate.settings.words: unknown key"
            " (tests.support.stub_consolidator:Backwards takes no settings)",
        ),
        (
            "class = 'tests.support.stub_consolidator:SamePrefix'\n[consolidate.settings]\nwords = 'x'",
            "consolidate.settings.words: expected `int`, got `str`",
        ),
        (
            "class = 'tests.support.stub_consolidator:SamePrefix'\n[consolidate.settings]\nwrods = 2",
            "consolidate.settings.wrods: unknown key",
        ),
        (
            "[consolidate.settings]\nwords = 2",
            "consolidate.settings: only a plugin takes settings; name it with"
            " consolidate.class = 'package.module:Class'",
        ),
    ],
)
def test_a_faulty_consolidation_plugin_is_named_at_load(
    toml: str, message: str, store: Store
) -> None:
    """The same checks and messages as for observer plugins, under `consolidate`."""
    config = parse_config(CONSOLIDATE + toml)
    with pytest.raises(ConfigError) as info:
        check_observers(config)
    assert str(info.value) == message
    with pytest.raises(ConfigError) as info:
        load_consolidator(config, store)
    assert str(info.value) == message


def test_a_consolidation_plugin_is_created_with_its_settings(store: Store) -> None:
    toml = "class = 'tests.support.stub_consolidator:SamePrefix'\n[consolidate.settings]\nwords = 2"
    plugin = load_consolidator(parse_config(CONSOLIDATE + toml), store)
    assert isinstance(plugin, SamePrefix) and plugin.words == 2
    assert load_consolidator(parse_config(CONSOLIDATE), store) is None  # the built-in LLM one
    off = "[consolidate]\nclass = 'tests.nope:Judge'"  # consolidation off: nothing is loaded
    assert load_consolidator(parse_config(off), store) is None


def test_one_class_runs_under_two_names(store: Store) -> None:
    """Two tables, one class: two observers, each with its own name and settings."""
    toml = "".join(
        f"[observers.{n}]\nclass = 'tests.support.observers:Configured'\nlabel = '{n}'\n"
        for n in ("a", "b")
    )
    observers = [o for o in _load(toml, store) if isinstance(o, Configured)]
    assert [(o.name, o.context.config.label) for o in observers] == [("a", "a"), ("b", "b")]


def test_a_plugin_is_created_with_its_context(store: Store) -> None:
    """The context holds the table's name, the decoded settings, a store view and a logger."""
    toml = "[observers.cfg]\nclass = 'tests.support.observers:Configured'\nlabel = 'audit'"
    (observer,) = _load(toml, store)
    context = Configured.last
    assert context is not None and isinstance(observer, Configured)
    assert (observer.name, context.name) == ("cfg", "cfg")
    assert (context.config.label, context.config.limit) == ("audit", 10)
    assert (context.store.last_seq, context.store.count) == (0, 0)
    assert not hasattr(context.store, "append") and not hasattr(context.store, "write")


async def test_the_store_view_reads_what_was_pushed(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """A plugin reads the log and the distilled memory through its read-only view."""
    config = load_config(
        write_config(
            short_tmp,
            fake_llm.base_url,
            observers={"cfg": {"class": "tests.support.observers:Configured", "label": "x"}},
        ),
        {},
    )
    with trio.fail_after(30):
        async with running_daemon(config) as api:
            async with socket_client(config.server.socket) as client:
                await client.post("/v1/interactions", json=[ONE, ONE])
            context = Configured.last
            assert context is not None
            assert [i.seq for i in await context.store.read_log(0, 10)] == [1, 2]

            async def both_read_all() -> bool:
                return min([await context.store.watermark(o) for o in ("cfg", "distill")]) >= 2

            await until(api.hub, both_read_all)
            facts = (await context.store.facts()).facts
            assert facts and "hello" in facts[0].text  # what distill wrote, read back


async def test_an_observer_whose_run_returns_is_an_error(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """A `run` that returns is logged and shown as the observer's error, then restarted."""
    Quitter.lives = 0
    config = load_config(
        write_config(
            short_tmp,
            fake_llm.base_url,
            distill={"enabled": False},
            observers={"quitter": {"class": "tests.support.observers:Quitter"}},
        ),
        {},
    )
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            await client.post("/v1/interactions", json=[ONE, ONE])
            while Quitter.lives < 2 or api.hub.backlog():
                await api.hub.changed()
            (status,) = (await client.get("/v1/status")).json()["observers"]
    assert status["last_error"] == (
        "ObserverError: observer 'quitter' returned from run; it must run until cancelled"
    )
    assert status["watermark"] == 2  # each life took one, and the restart resumed after it


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (
            "Modelless",
            "distiller.class: tests.support.stub_distiller:Modelless has no `model`"
            " (a non-empty str naming the model)",
        ),
        (
            "Blocking",
            "distiller.class: tests.support.stub_distiller:Blocking has no async method `distill`",
        ),
        (
            "AttemptBlind",
            "distiller.class: tests.support.stub_distiller:AttemptBlind.distill takes no keyword"
            " `attempt` (declare `*, attempt: int = 1`: the try of this transcript, from 1)",
        ),
    ],
)
def test_a_faulty_distiller_is_named_at_load(cls: str, message: str) -> None:
    """A distiller without a model name or an async distill fails before any LLM call."""
    with pytest.raises(ConfigError) as info:
        make_distiller(DistillerConfig(class_=f"tests.support.stub_distiller:{cls}"))
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            "[observers.norun]\nclass = 'tests.support.observers:NoRun'",
            "observers.norun: tests.support.observers:NoRun has no async method `run`",
        ),
        (
            "[consolidate]\nenabled = true\nclass = 'tests.support.stub_consolidator:Broken'",
            "consolidate: tests.support.stub_consolidator:Broken failed to start:"
            " RuntimeError: no judge model at /srv/judge",
        ),
        (
            "[distiller]\nclass = 'tests.support.stub_distiller:Modelless'",
            "distiller.class: tests.support.stub_distiller:Modelless has no `model`"
            " (a non-empty str naming the model)",
        ),
    ],
)
def test_serve_with_a_faulty_plugin_exits_2_with_one_line(
    sock_dir: Path, section: str, message: str
) -> None:
    """`forged serve` stops at once with status 2 and one line, rather than restarting it."""
    path = sock_dir / "forged.toml"
    path.write_text(
        f"[server]\nsocket = '{sock_dir}/s.sock'\n[store]\npath = '{sock_dir}/f.db'\n{section}\n"
    )
    command = [sys.executable, "-m", "forged", "serve", "--config", str(path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (2, f"forged: config error: {message}\n")


def example(document: str, name: str = "Counter") -> str:
    """The Python block of `document` that defines the example plugin `name`."""
    text = (Path(__file__).resolve().parents[2] / document).read_text()
    blocks = [b.split("\n", 1)[1] for b in text.split("```")[1::2] if b.startswith("python")]
    (code,) = [b for b in blocks if f"class {name}" in b]
    return code


@pytest.mark.parametrize("document", ["docs/plugins.md"])  # README points there
async def test_the_documented_example_plugin_runs(
    document: str, short_tmp: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example as the documentation prints it loads, runs and moves its watermark."""
    module = f"example_{document.replace('/', '_').replace('.', '_')}"
    (short_tmp / f"{module}.py").write_text(example(document))
    monkeypatch.syspath_prepend(str(short_tmp))
    config = load_config(
        write_config(
            short_tmp,
            fake_llm.base_url,
            distill={"enabled": False},
            observers={"counter": {"class": f"{module}:Counter"}},
        ),
        {},
    )
    with trio.fail_after(30):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            await client.post("/v1/interactions", json=[ONE, ONE, ONE])
            while api.hub.backlog():
                await api.hub.changed()
            (status,) = (await client.get("/v1/status")).json()["observers"]
    assert (status["name"], status["watermark"], status["last_error"]) == ("counter", 3, None)
