"""The layout as the code has it: docs/architecture.md's module map generated from the
docstrings, and every module's public names declared."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tests import modulemap

MODULES = sorted(
    p for p in (modulemap.REPO / "forged").rglob("*.py") if "__pycache__" not in p.parts
)


def test_the_module_map_is_the_codes() -> None:
    """A module added, moved or described anew changes the page: `python -m tests.modulemap`."""
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
