"""The route table: one row per method and path, matched in the order written, and the
memory browser's allow-list derived from the same rows."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Generic, NamedTuple, TypeVar

from forged.http.connection import Request, Response
from forged.http.params import Params

__all__ = ["Bound", "Handler", "Route", "RouteTable", "allowed", "path_pattern"]

A = TypeVar("A")
Handler = Callable[[Request, Params], Awaitable[Response]]
_NAMED = re.compile(r"\{(\w+)\}")  # `{id}` in a path: the item the rest of the path names
ANY_ITEM = ".+"  # what the daemon routes: the handler itself says what is wrong with an item


class Route(NamedTuple, Generic[A]):
    """One row of the table: `bind` gives the handler of `method` on `path` from what the
    routes serve (the API's parts); a query parameter outside `params` is a 400."""

    method: str
    path: str
    bind: Callable[[A], Handler]
    params: tuple[str, ...] = ()
    browser: bool = False  # the memory browser may forward it


class Bound(NamedTuple):
    """A route's handler, bound, and the query parameters it accepts."""

    handler: Handler
    params: tuple[str, ...]


def path_pattern(path: str, items: Mapping[str, str] | None = None) -> str:
    """The regex of a path as the table writes it, each `{name}` matching `items[name]` (any
    text without `items`)."""
    parts = _NAMED.split(path)  # literal, name, literal, ...
    return "".join(
        re.escape(p) if i % 2 == 0 else f"(?:{ANY_ITEM if items is None else items[p]})"
        for i, p in enumerate(parts)
    )


class RouteTable:
    """The rows bound to what they serve: a path without items is looked up, the others are
    matched in the order written (a longer path before the one it extends)."""

    def __init__(self, served: A, routes: Iterable[Route[A]]) -> None:
        self._exact: dict[str, dict[str, Bound]] = {}
        self._named: dict[str, dict[str, Bound]] = {}
        for route in routes:
            paths = self._named if _NAMED.search(route.path) else self._exact
            paths.setdefault(route.path, {})[route.method] = Bound(route.bind(served), route.params)
        self._patterns = [(re.compile(path_pattern(p)), p) for p in self._named]

    def find(self, path: str) -> tuple[str | None, dict[str, Bound] | None]:
        """The path as the table writes it and its handlers by method; (None, None) if none."""
        if (methods := self._exact.get(path)) is not None:
            return path, methods
        for pattern, written in self._patterns:
            if pattern.fullmatch(path):
                return written, self._named[written]
        return None, None


def allowed(routes: Iterable[Route[A]], items: Mapping[str, str]) -> dict[str, re.Pattern[str]]:
    """The browser's allow-list: by method, the paths of the rows it may forward, each
    `{name}` matching `items[name]`."""
    paths: dict[str, list[str]] = {}
    for route in routes:
        if route.browser:
            paths.setdefault(route.method, []).append(path_pattern(route.path, items))
    return {method: re.compile("|".join(p)) for method, p in paths.items()}
