"""A package's public surface: the names other packages import from it, each loaded from its
module on first use, so that importing a package costs nothing until a name is asked for."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module

__all__ = ["lazy_surface"]


def lazy_surface(package: str, names: Mapping[str, str | None]) -> Callable[[str], object]:
    """A module `__getattr__` for `package` giving each name of `names` from the submodule it
    maps to (None: the name is a submodule itself)."""

    def __getattr__(name: str) -> object:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = import_module(f"{package}.{names[name] or name}")
        return module if names[name] is None else getattr(module, name)

    return __getattr__
