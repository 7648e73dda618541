"""Configuration: a frozen msgspec Struct tree decoded from TOML, defaults as named constants."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from forged.errors import ConfigError, located

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_DATABASE",
    "DEFAULT_LLM_MODEL",
    "DEFAULT_LLM_URL",
    "DEFAULT_SOCKET",
    "MIB",
    "OCTAL_KEYS",
    "OFFLINE_DISTILLER",
    "BundledConfig",
    "Config",
    "ConsolidateConfig",
    "DistillConfig",
    "DistillStyle",
    "DistillerConfig",
    "IndexConfig",
    "LogConfig",
    "MetricsConfig",
    "Positive",
    "RecallConfig",
    "Seconds",
    "ServerConfig",
    "StoreConfig",
    "StructuredOutput",
    "cache_directory",
    "config_file",
    "decode_table",
    "load_config",
    "parse_config",
    "render_toml",
    "with_overrides",
]

DEFAULT_CONFIG_PATH = Path("/etc/forged/forged.toml")  # where `forged serve` looks without --config
DEFAULT_SOCKET = "/run/forged/forged.sock"  # RuntimeDirectory of the systemd unit
DEFAULT_DATABASE = "/var/lib/forged/forged.db"  # StateDirectory of the systemd unit
DEFAULT_LLM_URL = "http://127.0.0.1:11434/v1"  # Ollama's OpenAI-compatible endpoint
DEFAULT_LLM_MODEL = "smollm2:135m"  # Ollama's name for the bundled model
OFFLINE_DISTILLER = "forged.distill.offline:OfflineDistiller"  # `offline = true`, `serve --offline`
MIB = 1024 * 1024
OCTAL_KEYS = frozenset({"socket_mode"})  # file modes: written as 0o660, the way people read them
_OCTAL_LINE = re.compile(rf"^({'|'.join(OCTAL_KEYS)}) = (\d+)$", re.MULTILINE)
T = TypeVar("T")
_URL_PASSWORD = re.compile(r"^[a-z]+://[^/@]*:[^/@]*@")  # user:password@ in a connection URL

Positive = Annotated[int, msgspec.Meta(ge=1)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]
StructuredOutput = Literal["auto", "json_schema", "json_object", "none"]
DistillStyle = Literal["auto", "abstractive", "extractive"]


class _Section(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A config table: frozen, and an unknown key is an error."""


class ServerConfig(_Section, frozen=True):
    socket: str = DEFAULT_SOCKET
    socket_mode: int = 0o660
    allowed_uids: list[Annotated[int, msgspec.Meta(ge=0)]] = []
    max_connections: Positive = 256
    header_timeout: Seconds = 10.0
    body_timeout: Seconds = 30.0
    idle_timeout: Seconds = 60.0
    max_body_bytes: Positive = 16 * MIB
    max_receiving_bytes: Positive = 64 * MIB
    max_header_bytes: Positive = 16 * 1024
    max_messages: Annotated[int, msgspec.Meta(ge=1, le=256)] = 256
    max_text_chars: Positive = 1_000_000
    max_name_chars: Positive = 256
    max_backlog: Positive = 1_000_000
    shutdown_grace: Seconds = 20.0

    def __post_init__(self) -> None:
        if not 0 <= self.socket_mode <= 0o777:
            raise ValueError(
                f"socket_mode must be a file mode from 0o000 to 0o777, got {oct(self.socket_mode)}"
            )
        if self.max_receiving_bytes < self.max_body_bytes:
            raise ValueError(
                f"max_receiving_bytes ({self.max_receiving_bytes}) must be at least "
                f"max_body_bytes ({self.max_body_bytes})"
            )


class StoreConfig(_Section, frozen=True):
    path: str = DEFAULT_DATABASE
    busy_timeout_ms: Positive = 5000
    url: str = ""  # postgresql://user@host/db selects PostgreSQL instead of the SQLite file `path`
    password_file: str = ""  # the PostgreSQL password; else libpq's PGPASSWORD or ~/.pgpass
    pool_size: Positive = 4  # PostgreSQL connections per daemon for writes, the log, observers
    readers: Positive = 4  # recall's connections; a scope holds one, a client all but one

    def __post_init__(self) -> None:
        if self.url and not self.url.startswith(("postgresql://", "postgres://")):
            raise ValueError("`url` must start with postgresql://")
        if _URL_PASSWORD.match(self.url):
            raise ValueError("`url` must not hold a password; use password_file or PGPASSWORD")

    @property
    def backend(self) -> str:
        """The store this section selects: "postgresql" with a URL, else "sqlite"."""
        return "postgresql" if self.url else "sqlite"


class DistillerConfig(_Section, frozen=True):
    """The model client: where the model is, how to ask it, and the shape of its answer."""

    class_: str = msgspec.field(default="", name="class")
    offline: bool = False  # no model server: the offline distiller keeps the salient lines
    base_url: str = DEFAULT_LLM_URL
    model: str = DEFAULT_LLM_MODEL
    api_key_file: str = ""
    structured_output: StructuredOutput = "auto"
    style: DistillStyle = "auto"  # auto: extractive with the bundled model, else abstractive
    timeout: Seconds = 600.0
    max_tokens: Annotated[int, msgspec.Meta(ge=16, le=32768)] = 768
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] = 0.0
    max_facts: Positive = 64
    max_fact_chars: Positive = 2048
    max_summary_chars: Positive = 8192
    request_extra: dict[str, str | int | float | bool] = {}

    def __post_init__(self) -> None:
        if self.offline and self.class_:
            raise ValueError("offline = true and class both name a distiller; keep one")
        if not (self.class_ or self.offline) and not re.match(r"^https?://[^/\s]+", self.base_url):
            raise ValueError(f"base_url must be an http:// or https:// URL, got {self.base_url!r}")


class DistillConfig(_Section, frozen=True):
    """The distill observer's policy: batching, retries of a batch, the feed's buffer."""

    enabled: bool = True
    max_batch_interactions: Positive = 32
    max_batch_tokens: Annotated[int, msgspec.Meta(ge=64)] = 3000
    channel_capacity: Positive = 256
    max_attempts: Positive = 3
    backoff_initial: Seconds = 1.0
    backoff_max: Seconds = 60.0


class ConsolidateConfig(_Section, frozen=True):
    """`[consolidate]`: the consolidation observer and supersession at distillation, both off
    unless turned on."""

    enabled: bool = False  # the bundled model is too small to judge which facts still hold
    # a plugin ("package.module:Class") proposing the changes in place of the LLM, and its keys
    class_: str = msgspec.field(default="", name="class")
    settings: dict[str, Any] = {}  # [consolidate.settings]: decoded into the plugin's `Config`
    min_new_facts: Positive = 20  # a scope with this many facts new since its last run is due
    max_wait: Seconds = 86400.0  # seconds after which a scope with any new fact is due
    check_interval: Seconds = 60.0  # seconds between looks for due scopes
    facts_per_call: Annotated[int, msgspec.Meta(ge=2, le=500)] = 40  # facts shown per LLM call
    max_prompt_tokens: Annotated[int, msgspec.Meta(ge=64)] = 3000  # and the tokens they may take
    max_calls_per_hour: Positive = 60  # LLM calls at most, over any hour
    max_reason_chars: Positive = 300  # a change's reason is cut to this length
    keep_summaries: Positive = 20  # a scope's newest summaries left as they are; older condensed
    # the scope's current facts shown to the distiller beside a transcript, so a new state,
    # preference or correction can name what it replaces (0: none)
    related_facts_tokens: Annotated[int, msgspec.Meta(ge=0)] = 400
    # the search for them is stopped after this long, and the batch distilled without them
    related_facts_timeout_ms: Positive = 500


class BundledConfig(_Section, frozen=True):
    """`[bundled]`: the local model server `forged serve --bundled-llm` starts."""

    # CPU threads it computes on; 0: one per core forged may run on (its CPU affinity)
    threads: Annotated[int, msgspec.Meta(ge=0)] = 0


class RecallConfig(_Section, frozen=True):
    half_life_days: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    default_limit: Positive = 10
    max_limit: Positive = 100
    default_budget_tokens: Positive = 1000
    max_budget_tokens: Positive = 100_000
    query_timeout_ms: Positive = 10_000  # a search or context read stopped after this long: 503
    max_query_words: Positive = 32  # distinct words of a query searched; the answer lists the rest


class IndexConfig(_Section, frozen=True):
    """`[index]`: the turns' full-text index beside the store, derived from it (forged.index)."""

    enabled: bool = True
    path: str = ""  # its directory; "" is beside the SQLite file, `<store.path>.index`

    def directory(self, store: StoreConfig) -> Path:
        return Path(self.path or store.path + ".index")


class EmbedConfig(_Section, frozen=True):
    """`[embed]`: the embed observer (a vector for every turn, fact and summary) and recall by
    meaning beside recall by words."""

    enabled: bool = False
    batch: Annotated[int, msgspec.Meta(ge=1, le=256)] = 16  # texts per call of the model
    threads: Annotated[int, msgspec.Meta(ge=1, le=64)] = 1  # CPU threads of the model
    query_timeout_ms: Positive = 300  # a query's vector waited for; then recall by words alone


class LogConfig(_Section, frozen=True):
    format: Literal["auto", "console", "json", "journal"] = "auto"
    level: Literal["debug", "info", "warning", "error"] = "info"


class MetricsConfig(_Section, frozen=True):
    """`[metrics]`: `GET /v1/metrics` is always on the socket; a file for node_exporter too."""

    textfile: str = ""  # node_exporter's textfile collector reads it; empty = no file
    interval: Annotated[float, msgspec.Meta(ge=1)] = 15.0  # seconds between two writes of it


class Config(_Section, frozen=True):
    server: ServerConfig = ServerConfig()
    store: StoreConfig = StoreConfig()
    distiller: DistillerConfig = DistillerConfig()
    distill: DistillConfig = DistillConfig()
    consolidate: ConsolidateConfig = ConsolidateConfig()
    bundled: BundledConfig = BundledConfig()
    observers: dict[str, dict[str, Any]] = {}  # [observers.NAME]: `class` and its settings
    recall: RecallConfig = RecallConfig()
    index: IndexConfig = IndexConfig()
    embed: EmbedConfig = EmbedConfig()
    log: LogConfig = LogConfig()
    metrics: MetricsConfig = MetricsConfig()


_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<key>[^`]+)`$")
_ENV_OVERRIDES = {  # environment variable -> distiller key it replaces
    "FORGED_DISTILLER_URL": "base_url",
    "FORGED_DISTILLER_MODEL": "model",
    "FORGED_DISTILLER_API_KEY_FILE": "api_key_file",
}


def _explain(error: msgspec.ValidationError | msgspec.DecodeError, table: str = "") -> str:
    """Turn msgspec's message into `key: problem`, naming the key the way the file spells it.

    `table` is where the decoded value sits in the file (a plugin's `observers.NAME`).
    """
    if not isinstance(error, msgspec.ValidationError):
        return f"not valid TOML: {error}"
    problem, at = located(str(error))
    key = ".".join(filter(None, [table, (at or "").removeprefix("$").removeprefix(".")]))
    if m := _UNKNOWN.match(problem):
        return ".".join(filter(None, [key, m["key"]])) + ": unknown key"
    if at is None and not table:
        return problem
    return f"{key or '(top level)'}: {problem[0].lower()}{problem[1:]}"


def decode_table(table: Mapping[str, Any], type_: type[T], key: str) -> T:
    """A config table decoded into `type_` (a plugin's settings), unknown keys refused."""
    known = set(getattr(type_, "__struct_encode_fields__", ()))
    for name in table:
        if name not in known:
            raise ConfigError(f"{key}.{name}: unknown key")
    try:
        return msgspec.convert(table, type_)
    except msgspec.ValidationError as exc:
        raise ConfigError(_explain(exc, key)) from exc


def parse_config(data: bytes | str, source: str = "<config>") -> Config:
    """Decode TOML text into a Config, or raise ConfigError naming the key and the problem."""
    try:
        return msgspec.convert(msgspec.toml.decode(data), Config)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ConfigError(f"{source}: {_explain(exc)}") from exc


def with_overrides(config: Config, env: Mapping[str, str]) -> Config:
    """Apply the FORGED_DISTILLER_* variables present in `env`."""
    changes = {key: env[var] for var, key in _ENV_OVERRIDES.items() if env.get(var)}
    if not changes:
        return config
    try:
        distiller = msgspec.structs.replace(config.distiller, **changes)
        msgspec.convert(msgspec.to_builtins(distiller), DistillerConfig)
    except (ValueError, msgspec.ValidationError) as exc:
        names = ", ".join(var for var in _ENV_OVERRIDES if env.get(var))
        raise ConfigError(f"environment: {names}: {exc}") from exc
    return msgspec.structs.replace(config, distiller=distiller)


def config_file(explicit: str | Path | None, env: Mapping[str, str]) -> Path | None:
    """The file the daemon reads: `--config`, then `FORGED_CONFIG`, then the default if present."""
    if explicit:
        return Path(explicit)
    if env.get("FORGED_CONFIG"):
        return Path(env["FORGED_CONFIG"])
    return DEFAULT_CONFIG_PATH if DEFAULT_CONFIG_PATH.exists() else None


def cache_directory(env: Mapping[str, str]) -> Path:
    """Where the daemon keeps what it can rebuild (the scrubber's compiled prefilter): the
    unit's CacheDirectory= under systemd, else the XDG cache directory."""
    if env.get("CACHE_DIRECTORY"):
        return Path(env["CACHE_DIRECTORY"].split(":")[0])
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "forged"


def load_config(path: Path | None, env: Mapping[str, str]) -> Config:
    """Read the file at `path` (embedded defaults when it is None) and apply `env` overrides."""
    if path is None:
        config = Config()
    else:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
        config = parse_config(data, str(path))
    return with_overrides(config, env)


def render_toml(config: Config) -> str:
    """The configuration as a TOML file that decodes back to the same value (tables included)."""
    text = msgspec.toml.encode(config).decode()
    return _OCTAL_LINE.sub(lambda m: f"{m[1]} = {int(m[2]):#o}", text)
