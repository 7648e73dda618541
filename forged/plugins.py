"""Loading plugin classes (observers, distillers) named in config as `package.module:Name`."""

from __future__ import annotations

import importlib
from typing import Any

from forged.errors import ConfigError


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
