"""The layout as the code has it: docs/architecture.md's module map generated from the
docstrings, and every module's public names declared."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from forged.config import Config
from forged.errors import ForgedError
from tests.support import modulemap

MODULES = sorted(
    p for p in (modulemap.REPO / "forged").rglob("*.py") if "__pycache__" not in p.parts
)


def test_the_module_map_is_the_codes() -> None:
    """A module added, moved or described anew changes the page: `python -m tests.support.modulemap`."""
    assert modulemap.current(modulemap.PAGE.read_text()) == modulemap.render()


def _defines(tree: ast.Module) -> bool:
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign)
    return any(isinstance(n, kinds) for n in tree.body)


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(modulemap.REPO)) for p in MODULES])
def test_every_module_declares_its_public_names(path: Path) -> None:
    """`__all__` on every module that defines something, each name in it defined there."""
    tree = ast.parse(path.read_text())
    if path.name == "__main__.py" or not _defines(tree):
        return
    dotted = ".".join(path.relative_to(modulemap.REPO).with_suffix("").parts).removesuffix(
        ".__init__"
    )
    module = importlib.import_module(dotted)
    assert hasattr(module, "__all__"), f"{dotted} has no __all__"
    assert [n for n in module.__all__ if not hasattr(module, n)] == []


# Modules of the flat layout that no longer exist under any name: a docstring naming one is stale.
RETIRED = frozenset(
    [
        "cli_edits",
        "consolidate_observer",
        "distill_observer",
        "edit_api",
        "httpconn",
        "httpserver",
        "llm_answer",
        "mcp_server",
        "observing",
        "pgrecall",
        "pgschema",
        "pgstore",
        "scrub_patterns",
        "scrub_providers",
        "scrub_rules",
        "sqlstore",
    ]
)
FILE_SUFFIXES = frozenset({"db", "json", "jsonl", "md", "py", "service", "sock", "socket", "toml"})
_FORGED = re.compile(r"(?<![\w/.-])forged(?:\.\w+)+(?::\w+)?")  # forged.store.sqlite:Store
_SPAN = re.compile(r"``?([\w.:]+)``?")  # `store.sqlite.Store`, ``scrub.rules``
_PATH = re.compile(r"(?<![\w/.-])(?:forged|tests|bench|docs)/[\w/.-]*[\w/]")
PACKAGES = frozenset(p.name for p in (modulemap.REPO / "forged").iterdir() if p.is_dir())
SOURCES = sorted(
    p
    for folder in ("forged", "tests", "bench")
    for p in (modulemap.REPO / folder).rglob("*.py")
    if "__pycache__" not in p.parts
)


def _docstrings(path: Path) -> list[str]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    nodes = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, kinds)]
    return [doc for n in nodes if (doc := ast.get_docstring(n))]


def _resolves(dotted: str) -> bool:
    """A dotted name under forged (`package.module` or `package.module:Name`) is a module or
    something a module defines."""
    name, _, attr = dotted.partition(":")
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for part in [*parts[cut:], *([attr] if attr else [])]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


def _config_key(dotted: str) -> bool:
    """`recall.query_timeout_ms` names a config key (a table's name may stand for any table)."""
    table: Any = Config
    for part in dotted.split("."):
        if not (isinstance(table, type) and issubclass(table, msgspec.Struct)):
            return table is dict or getattr(table, "__origin__", None) is dict
        fields = {f.encode_name: f.type for f in msgspec.structs.fields(table)}
        if part not in fields:
            return False
        table = fields[part]
    return True


def _stale(doc: str) -> list[str]:
    """What a docstring names that is not there: modules, their names, files of the repo."""
    stale = [r for r in _FORGED.findall(doc) if r.rsplit(".", 1)[-1] not in FILE_SUFFIXES]
    stale = [r for r in stale if not _resolves(r)]
    for span in _SPAN.findall(doc):
        head = span.split(".")[0].split(":")[0]
        inside = head in PACKAGES and "." in span  # `store.sqlite.Store`: a name inside forged
        if head in RETIRED or (inside and not (_resolves(f"forged.{span}") or _config_key(span))):
            stale.append(span)
    stale += [p for p in _PATH.findall(doc) if not (modulemap.REPO / p).exists()]
    return stale


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(modulemap.REPO)) for p in SOURCES])
def test_every_module_a_docstring_names_resolves(path: Path) -> None:
    """A docstring that names a module, a name in one or a file of the repo names one that is
    there: a move leaves no stale pointer behind."""
    assert [s for doc in _docstrings(path) for s in _stale(doc)] == []


def _exceptions() -> list[type[BaseException]]:
    found = []
    for path in MODULES:
        if path.name == "__main__.py":  # importing it runs the command line
            continue
        dotted = ".".join(path.relative_to(modulemap.REPO).with_suffix("").parts)
        module = importlib.import_module(dotted.removesuffix(".__init__"))
        for value in vars(module).values():
            defined_here = getattr(value, "__module__", None) == module.__name__
            if defined_here and isinstance(value, type) and issubclass(value, BaseException):
                found.append(value)
    return found


def test_every_exception_forged_defines_is_a_forged_error() -> None:
    """One root: whoever catches `ForgedError` catches everything forged raises on purpose."""
    exceptions = _exceptions()
    assert len(exceptions) > 20  # the scan found the tree
    assert [e.__qualname__ for e in exceptions if not issubclass(e, ForgedError)] == []


def _logger_names(path: Path) -> list[str]:
    """What each module-level `structlog.get_logger(...)` is given, as source text."""
    calls = [
        node.value
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
    ]
    return [
        ast.unparse(call.args[0]) if call.args else ""
        for call in calls
        if ast.unparse(call.func) == "structlog.get_logger"
    ]


def test_every_logger_is_named_for_its_module() -> None:
    """Loggers are named `__name__`, so a module moved takes its logger's name with it."""
    names = {str(p.relative_to(modulemap.REPO)): _logger_names(p) for p in MODULES}
    assert sum(len(n) for n in names.values()) > 5  # the scan found the loggers
    assert {p: n for p, n in names.items() if set(n) - {"__name__"}} == {}


def _imported(path: Path) -> set[str]:
    """Every module a source file imports, by its dotted name."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_only_the_tests_and_bench_import_the_test_support() -> None:
    """forged imports nothing of the tests; bench/ and tests/support/ only tests/support/."""
    support = re.compile(r"^tests\.support(\.|$)")
    wrong = {
        str(p.relative_to(modulemap.REPO)): sorted(bad)
        for p in SOURCES
        if p.parts[len(modulemap.REPO.parts)] != "tests" or "support" in p.parts
        if (bad := {m for m in _imported(p) if m.split(".")[0] == "tests" and not support.match(m)})
    }
    assert wrong == {}
    assert any("tests.support" in m for p in SOURCES if "bench" in p.parts for m in _imported(p))


def _imports_across_packages() -> list[tuple[str, str, str]]:
    """Every name a module imports from another package of forged, as (module, package, name)."""
    found = []
    for path in MODULES:
        parts = path.relative_to(modulemap.REPO).with_suffix("").parts
        own = parts[1] if len(parts) > 2 else None
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("forged.")):
                continue
            package = (node.module or "").split(".")[1]
            if package != own and (modulemap.REPO / "forged" / package).is_dir():
                found += [(str(path), package, alias.name) for alias in node.names]
    return found


def test_an_import_across_packages_names_the_packages_surface() -> None:
    """What one package imports from another is in that package's `__all__`, and every name
    of a package's `__all__` resolves (lazily, from the module that defines it)."""
    crossing = _imports_across_packages()
    assert len(crossing) > 100  # the scan found the imports
    outside = [
        (module, f"forged.{package}", name)
        for module, package, name in crossing
        if name not in importlib.import_module(f"forged.{package}").__all__
    ]
    assert outside == []
    for package in {package for _, package, _ in crossing}:
        surface = importlib.import_module(f"forged.{package}")
        assert [n for n in surface.__all__ if getattr(surface, n, None) is None] == []
