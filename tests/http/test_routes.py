"""Tests for forged.http.table and the API's rows (forged.http.routes): one flat table, matched
in the order written, and the memory browser's allow-list taken from it."""

from __future__ import annotations

import pytest

from forged.http.connection import Request, Response
from forged.http.params import Params
from forged.http.routes import ROUTES
from forged.http.table import Route, RouteTable
from forged.ui.server import ALLOWED


async def _unserved(request: Request, params: Params) -> Response:
    raise AssertionError("finding a route calls no handler")


def _table() -> RouteTable:
    """The API's rows, each bound to a handler that is never called: what is found is tested."""
    rows: list[Route[None]] = [
        Route(r.method, r.path, lambda _: _unserved, r.params, r.browser) for r in ROUTES
    ]
    return RouteTable(None, rows)


def _found(path: str) -> tuple[str | None, list[str]]:
    written, methods = _table().find(path)
    return written, sorted(methods or {})


def test_each_method_and_path_is_one_row() -> None:
    """No row is written twice: the first would hide the second."""
    keys = [(r.method, r.path) for r in ROUTES]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(
    ("path", "written", "methods"),
    [
        ("/v1/facts", "/v1/facts", ["GET", "POST"]),
        ("/v1/facts/12", "/v1/facts/{id}", ["DELETE", "GET"]),
        ("/v1/facts/12/pin", "/v1/facts/{id}/pin", ["DELETE", "PUT"]),
        ("/v1/facts/12/correct", "/v1/facts/{id}/correct", ["POST"]),
        ("/v1/facts//pin", "/v1/facts/{id}", ["DELETE", "GET"]),  # no id before `/pin`
        ("/v1/facts/abc", "/v1/facts/{id}", ["DELETE", "GET"]),  # the handler says why not
        ("/v1/scopes/a/b/pin", "/v1/scopes/{scope}", ["DELETE"]),  # a scope holds any text
        ("/v1/facts/", None, []),
        ("/v1/nope", None, []),
    ],
)
def test_a_path_finds_its_row(path: str, written: str | None, methods: list[str]) -> None:
    """A path without items is looked up; one naming an item takes the longest row first."""
    assert _found(path) == (written, methods)


def test_the_browser_forwards_exactly_the_rows_marked_for_it() -> None:
    """Every row marked for the browser passes its allow-list with an id; no other row does."""
    for row in ROUTES:
        path = row.path.replace("{id}", "12").replace("{scope}", "web")
        pattern = ALLOWED.get(row.method)
        assert bool(pattern and pattern.fullmatch(path)) == row.browser, (row.method, row.path)


def test_the_browser_names_items_as_the_page_writes_them() -> None:
    """An id is a number, a scope one segment other than `.` and `..`: nothing else is
    forwarded where they go."""
    assert ALLOWED["GET"].fullmatch("/v1/facts/12")
    assert not ALLOWED["GET"].fullmatch("/v1/facts/../status")
    assert not ALLOWED["DELETE"].fullmatch("/v1/facts/0")
    assert not ALLOWED["DELETE"].fullmatch("/v1/facts/" + "1" * 19)  # past a stored id's digits
    assert ALLOWED["DELETE"].fullmatch("/v1/scopes/a.b")
    assert not any(ALLOWED["DELETE"].fullmatch(f"/v1/scopes/{s}") for s in ("..", ".", "a/b"))
