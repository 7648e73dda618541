"""Configuration: defaults, the documented file, overrides, and one clear line per mistake."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from forged.config import Config, cache_directory, load_config, parse_config, render_toml
from forged.errors import ConfigError
from forged.scrub import scan as scrub
from forged.store.postgres_schema import MIGRATIONS as PG_MIGRATIONS
from tests.support.postgres import Server

ROOT = Path(__file__).resolve().parent.parent


def test_documented_file_holds_exactly_the_defaults() -> None:
    """config/forged.toml documents every key with the value the code uses."""
    assert load_config(ROOT / "config" / "forged.toml", {}) == Config()


def test_documented_file_names_every_key() -> None:
    """Each key of every section appears in the documented file."""
    text = (ROOT / "config" / "forged.toml").read_text()
    for section in Config.__struct_fields__:
        assert f"[{section}]" in text
        struct = getattr(Config(), section)
        if isinstance(struct, dict):  # [observers.NAME] plugin tables: a commented example
            continue
        for field in type(struct).__struct_encode_fields__:
            assert f"\n{field} = " in text, f"{section}.{field} is not documented"


def test_dev_config_keeps_everything_under_var() -> None:
    """`make run` uses ./var for the socket and the database."""
    config = load_config(ROOT / "config" / "forged.dev.toml", {})
    assert config.server.socket == "./var/run/forged.sock"
    assert config.store.path == "./var/forged.db"


def test_environment_overrides_the_distiller() -> None:
    """FORGED_DISTILLER_URL and FORGED_DISTILLER_MODEL replace the file's values."""
    env = {"FORGED_DISTILLER_URL": "http://127.0.0.1:9/v1", "FORGED_DISTILLER_MODEL": "qwen"}
    config = load_config(None, env)
    assert (config.distiller.base_url, config.distiller.model) == ("http://127.0.0.1:9/v1", "qwen")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[server]\nsokcet = 'x'", "f.toml: server.sokcet: unknown key"),
        ("[nope]\na = 1", "f.toml: nope: unknown key"),
        (
            "[distill]\nmax_batch_tokens = 'many'",
            "f.toml: distill.max_batch_tokens: expected `int`, got `str`",
        ),
        (
            "[distill]\nchannel_capacity = 0",
            "f.toml: distill.channel_capacity: expected `int` >= 1",
        ),
        (
            "[distiller]\nstructured_output = 'xml'",
            "f.toml: distiller.structured_output: invalid enum value 'xml'",
        ),
        (
            "[distiller]\nbase_url = 'localhost:8080'",
            "f.toml: distiller: base_url must be an http:// or https:// URL, got 'localhost:8080'",
        ),
        (
            "[distiller]\noffline = true\nclass = 'my.distiller:Mine'",
            "f.toml: distiller: offline = true and class both name a distiller; keep one",
        ),
        ("[distiller]\noffline = 'yes'", "f.toml: distiller.offline: expected `bool`, got `str`"),
        ("[server]\nallowed_uids = [-1]", "f.toml: server.allowed_uids[0]: expected `int` >= 0"),
        ("[bundled]\nthreads = -2", "f.toml: bundled.threads: expected `int` >= 0"),
        (
            "[server]\nmax_receiving_bytes = 1024",
            "f.toml: server: max_receiving_bytes (1024) must be at least max_body_bytes (16777216)",
        ),
        (
            "[server\n",
            "f.toml: not valid TOML: Expected ']' at the end of a table declaration (at line 1, column 8)",
        ),
    ],
)
def test_bad_config_names_the_key_and_the_problem(text: str, message: str) -> None:
    """Each mistake is one message: where it is and what is wrong."""
    with pytest.raises(ConfigError) as info:
        parse_config(text, "f.toml")
    assert str(info.value) == message


def test_bad_environment_value_is_named() -> None:
    """A bad override names the variable."""
    with pytest.raises(ConfigError, match=r"^environment: FORGED_DISTILLER_URL: base_url must be"):
        load_config(None, {"FORGED_DISTILLER_URL": "nope"})


def forged(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the `forged` command as a user would."""
    command = [sys.executable, "-m", "forged", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, env=env)


@pytest.mark.integration
def test_serve_with_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    """`forged serve` on a bad file prints one line on stderr and exits with status 2."""
    path = tmp_path / "forged.toml"
    path.write_text("[distill]\nmax_batch_interactions = -3\n")
    result = forged("serve", "--config", str(path))
    assert result.returncode == 2
    assert (
        result.stderr
        == f"forged: config error: {path}: distill.max_batch_interactions: expected `int` >= 1\n"
    )


@pytest.mark.integration
def test_missing_config_file_is_one_line(tmp_path: Path) -> None:
    """A config path that does not exist is reported, not a traceback."""
    result = forged("check-config", "--config", str(tmp_path / "no.toml"))
    assert result.returncode == 2
    assert (
        result.stderr
        == f"forged: config error: {tmp_path / 'no.toml'}: cannot read: No such file or directory\n"
    )


@pytest.mark.integration
def test_check_config_prints_the_effective_configuration(tmp_path: Path) -> None:
    """check-config shows the file merged with defaults and FORGED_* overrides, and exits 0."""
    path = tmp_path / "forged.toml"
    path.write_text("[distill]\nmax_batch_interactions = 7\n")
    env = {"FORGED_DISTILLER_MODEL": "llama3.2", "PATH": "/usr/bin:/bin"}
    result = forged("check-config", "--config", str(path), env=env)
    assert result.returncode == 0, result.stderr
    effective = parse_config(result.stdout)  # the printout is itself a valid config file
    assert effective.distill.max_batch_interactions == 7
    assert effective.distiller.model == "llama3.2"


@pytest.mark.integration
def test_check_config_writes_file_modes_in_octal(tmp_path: Path) -> None:
    """socket_mode is printed as the file says it, `0o660`, not as the integer 432."""
    path = tmp_path / "forged.toml"
    path.write_text("[server]\nsocket_mode = 0o640\n")
    result = forged("check-config", "--config", str(path))
    assert "\nsocket_mode = 0o640\n" in result.stdout


def test_rendered_config_round_trips() -> None:
    """render_toml writes what parse_config reads back unchanged, tables within tables too."""
    config = load_config(None, {"FORGED_DISTILLER_MODEL": 'a "quoted" model'})
    assert parse_config(render_toml(config)) == config
    text = "[distiller]\nrequest_extra = {top_k = 4}\n[observers.a]\nclass = 'm:C'\nkeep = [1, 2]"
    assert parse_config(render_toml(parse_config(text))) == parse_config(text)


@pytest.mark.integration
def test_check_config_checks_plugin_settings(tmp_path: Path) -> None:
    """check-config loads each observer plugin and checks its table like forged's own."""
    path = tmp_path / "forged.toml"
    path.write_text("[observers.audit]\nclass = 'forged.observers.audit:AuditLog'\n")
    result = forged("check-config", "--config", str(path))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "forged: config error: observers.audit: object missing required field `path`\n"
    )


def test_rendered_config_round_trips_its_tables() -> None:
    """A config with `request_extra` set renders as a TOML table that reads back the same."""
    text = '[distiller.request_extra]\nrepeat_penalty = 1.2\nstop = "a \\"b\\""\nstream = false\n'
    config = parse_config(text)
    assert parse_config(render_toml(config)) == config
    assert config.distiller.request_extra == {
        "repeat_penalty": 1.2,
        "stop": 'a "b"',
        "stream": False,
    }


@pytest.mark.integration
def test_check_config_reports_a_bad_file_in_one_line(tmp_path: Path) -> None:
    """check-config on an invalid file prints nothing on stdout, one line on stderr, exits 2."""
    path = tmp_path / "forged.toml"
    path.write_text("[server]\nsocket_mode = 0o1777\n")
    result = forged("check-config", "--config", str(path))
    assert (result.returncode, result.stdout) == (2, "")
    assert (
        result.stderr
        == f"forged: config error: {path}: server: socket_mode must be a file mode from 0o000 to 0o777, got 0o1777\n"
    )


def test_a_rendered_table_value_round_trips() -> None:
    """render_toml writes `request_extra` as an inline table parse_config reads back."""
    config = parse_config('[distiller]\nrequest_extra = { repeat_penalty = 1.2, "a b" = "c" }\n')
    assert parse_config(render_toml(config)) == config


def test_a_password_in_the_store_url_is_refused() -> None:
    """A PostgreSQL password belongs in password_file or PGPASSWORD, never in the config."""
    with pytest.raises(
        ConfigError,
        match=r"^<config>: store: `url` must not hold a password; use password_file or PGPASSWORD$",
    ):
        parse_config('[store]\nurl = "postgresql://forged:secret@db/forged"\n')


def test_a_store_url_of_another_database_is_refused() -> None:
    """Only PostgreSQL URLs select another store."""
    with pytest.raises(
        ConfigError, match=r"^<config>: store: `url` must start with postgresql://$"
    ):
        parse_config('[store]\nurl = "mysql://db/forged"\n')


@pytest.mark.integration
def test_check_config_names_the_store_and_its_schema_version(
    postgres: Server, tmp_path: Path
) -> None:
    """check-config connects to PostgreSQL and says which schema version it holds."""
    url = postgres.new_database()
    path = tmp_path / "forged.toml"
    path.write_text(f'[store]\nurl = "{url}"\n')
    result = forged("check-config", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert (
        f"# store: postgresql at {url}, schema version 0 (migrated to {len(PG_MIGRATIONS)} at start)\n"
        in result.stdout
    )


@pytest.mark.integration
def test_check_config_reports_an_unreachable_store(tmp_path: Path) -> None:
    """A PostgreSQL server that does not answer is one line on stderr, and status 1."""
    path = tmp_path / "forged.toml"
    path.write_text(f'[store]\nurl = "postgresql://forged@/forged?host={tmp_path}"\n')
    result = forged("check-config", "--config", str(path))
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith(
        f"forged: cannot use PostgreSQL at postgresql://forged@/forged?host={tmp_path}: "
    )
    assert "failed: No such file or directory" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.integration
def test_backup_of_a_postgresql_store_points_to_pg_dump(tmp_path: Path) -> None:
    """forged backup copies SQLite files; for PostgreSQL it says what to use instead."""
    path = tmp_path / "forged.toml"
    path.write_text('[store]\nurl = "postgresql://forged@db/forged"\n')
    result = forged("backup", str(tmp_path / "copy.db"), "--config", str(path))
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        "forged: backup and restore copy the SQLite file; use pg_dump for PostgreSQL\n"
    )


def test_retry_keys_belong_to_distill_not_to_the_distiller() -> None:
    """The retry policy is the distill observer's: in `[distiller]` it is an unknown key."""
    with pytest.raises(ConfigError, match=r"^f.toml: distiller.max_attempts: unknown key$"):
        parse_config("[distiller]\nmax_attempts = 4\n", "f.toml")


def test_cache_directory_is_systemds_else_xdgs() -> None:
    """The unit's CacheDirectory= (the first, when several), else XDG_CACHE_HOME, else ~/.cache."""
    home = Path.home() / ".cache" / "forged"
    assert cache_directory(
        {"CACHE_DIRECTORY": "/var/cache/forged:/x", "XDG_CACHE_HOME": "/c"}
    ) == Path("/var/cache/forged")
    assert cache_directory({"XDG_CACHE_HOME": "/c"}) == Path("/c/forged")
    assert cache_directory({"XDG_CACHE_HOME": ""}) == cache_directory({}) == home


def test_the_tests_cache_is_a_temporary_directory_of_their_own() -> None:
    """The suite's daemons share one compiled prefilter, never in the user's cache
    (tests/conftest.py): the directory their environment names is a temporary one."""
    cache = cache_directory(os.environ)
    assert cache.is_relative_to(tempfile.gettempdir())
    if scrub.prepare().engine.name == "hyperscan":
        assert list(cache.glob("prefilter-*.hsdb"))  # compiled once, before the first test
