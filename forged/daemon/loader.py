"""The plugin loader: observers, consolidation judges and distillers named in config, created
and checked before they run. It sits with the daemon, the one layer that sees every other.

An observer plugin is a class named in its own config table, `[observers.NAME]`, by `class =
"package.module:Name"`. It is created with an `ObserverContext` (its name, its settings decoded
into its own `Config` Struct, a read-only view of the store, a logger) and must have that `name`
and an async `run(interactions, progress)` that lives as long as the daemon. Every check happens
at start and fails as a config error naming what is missing, never after the first interaction.

A consolidation plugin, `[consolidate] class`, is created the same way (its settings from
`[consolidate.settings]`) and must have an async `propose(scope, facts)` (forged.consolidate).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, cast

import msgspec

from forged.config import OFFLINE_DISTILLER, Config, DistillerConfig, decode_table
from forged.consolidate.judgement import Proposer
from forged.errors import ConfigError
from forged.hub import Observer
from forged.llm.distiller import Distiller, ModeMemory, OpenAIDistiller
from forged.models import DISTILL_OBSERVER, EMBED_OBSERVER
from forged.plugin_api import ObserverContext, StoreView
from forged.store.backend import Backend

__all__ = [
    "BUILT_IN",
    "CONSOLIDATE",
    "check_observers",
    "load_consolidator",
    "load_object",
    "load_observers",
    "make_distiller",
    "require_async",
]

CONSOLIDATE = "consolidate"  # the consolidate observer's name, which its plugin's context takes
BUILT_IN = frozenset(
    {DISTILL_OBSERVER, CONSOLIDATE, EMBED_OBSERVER}
)  # observer names forged itself uses


def load_object(spec: str, key: str) -> Any:
    """Import `package.module:Name`; `key` names the config key for the error message."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{key}: {spec!r} is not of the form 'package.module:Name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{key}: cannot import {module_name!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"{key}: module {module_name!r} has no {attr!r}") from None


def require_async(obj: object, method: str, key: str, spec: str) -> None:
    """Fail at load time when `obj` lacks the async method the daemon will await."""
    if not inspect.iscoroutinefunction(getattr(obj, method, None)):
        raise ConfigError(f"{key}: {spec} has no async method `{method}`")


def _settings(cls: Any, table: dict[str, Any], key: str, spec: str) -> Any:
    """The table (less `class`) decoded into the plugin's `Config`, with forged's own errors."""
    settings = {k: v for k, v in table.items() if k != "class"}
    config_type = getattr(cls, "Config", None)
    if config_type is None:
        if settings:
            raise ConfigError(
                f"{key}.{next(iter(settings))}: unknown key ({spec} takes no settings)"
            )
        return None
    if not (isinstance(config_type, type) and issubclass(config_type, msgspec.Struct)):
        raise ConfigError(f"{key}: {spec}.Config must be a msgspec.Struct")
    return decode_table(settings, config_type, key)


def _resolve(name: str, table: dict[str, Any]) -> tuple[Any, Any, str]:
    """Import and check one plugin class and decode its settings: (class, settings, spec)."""
    key = f"observers.{name}"
    if name in BUILT_IN:
        raise ConfigError(f"{key}: {name!r} is the name of a built-in observer; choose another")
    spec = table.get("class")
    if not isinstance(spec, str):
        raise ConfigError(f"{key}.class: missing; name the plugin as 'package.module:Class'")
    cls = load_object(spec, f"{key}.class")
    require_async(cls, "run", key, spec)
    return cls, _settings(cls, table, key, spec), spec


def _consolidator(config: Config) -> tuple[Any, Any, str] | None:
    """The consolidation plugin's class, settings and spec, checked; None for the built-in one
    (or with consolidation off)."""
    spec, settings = config.consolidate.class_, config.consolidate.settings
    if not config.consolidate.enabled:
        return None
    if not spec:
        if settings:
            raise ConfigError(
                "consolidate.settings: only a plugin takes settings; name it"
                " with consolidate.class = 'package.module:Class'"
            )
        return None
    cls = load_object(spec, "consolidate.class")
    require_async(cls, "propose", "consolidate.class", spec)
    return cls, _settings(cls, settings, "consolidate.settings", spec), spec


def _create(cls: Any, context: ObserverContext[Any], key: str, spec: str) -> Any:
    """The plugin created with its context; its own failure to start is one line, not a trace."""
    try:
        return cls(context)
    except Exception as exc:
        raise ConfigError(f"{key}: {spec} failed to start: {type(exc).__name__}: {exc}") from exc


def check_observers(config: Config) -> None:
    """Import every plugin and decode its settings; raise ConfigError on the first fault."""
    for name, table in config.observers.items():
        _resolve(name, table)
    _consolidator(config)


def load_consolidator(config: Config, store: Backend) -> Proposer | None:
    """The consolidation plugin of the config, created and checked; None for the built-in one."""
    if (found := _consolidator(config)) is None:
        return None
    cls, settings, spec = found
    context = ObserverContext(CONSOLIDATE, settings, StoreView(store, config.recall))
    proposer: Proposer = _create(cls, context, "consolidate", spec)
    return proposer


def load_observers(config: Config, store: Backend) -> list[Observer]:
    """Create every observer plugin of the config, each with its context, checked."""
    view = StoreView(store, config.recall)
    observers: list[Observer] = []
    for name, table in config.observers.items():
        cls, settings, spec = _resolve(name, table)
        observer = _create(cls, ObserverContext(name, settings, view), f"observers.{name}", spec)
        actual = getattr(observer, "name", None)
        if actual != name:
            found = "has no `name`" if actual is None else f"is named {actual!r}"
            raise ConfigError(
                f"observers.{name}: {spec} {found}; an observer takes its table's name"
                f" (set `self.name = context.name`)"
            )
        observers.append(observer)
    return observers


def make_distiller(config: DistillerConfig, memory: ModeMemory | None = None) -> Distiller:
    """The distiller named by `[distiller] class`, the offline one (`offline = true`), or the
    OpenAI-compatible client."""
    if config.offline:
        key, spec = "distiller.offline", OFFLINE_DISTILLER
    elif config.class_:
        key, spec = "distiller.class", config.class_
    else:
        return OpenAIDistiller(config, memory=memory)
    distiller = load_object(spec, key)(config)
    model = getattr(distiller, "model", None)
    if not isinstance(model, str) or not model:
        raise ConfigError(f"{key}: {spec} has no `model` (a non-empty str naming the model)")
    require_async(distiller, "distill", key, spec)
    if "attempt" not in inspect.signature(distiller.distill).parameters:
        raise ConfigError(
            f"{key}: {spec}.distill takes no keyword `attempt`"
            " (declare `*, attempt: int = 1`: the try of this transcript, from 1)"
        )
    return cast(Distiller, distiller)
