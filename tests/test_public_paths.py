"""The import paths users already write keep working: in configs (`class = "..."`), in their
code and in their packaging, whatever package the object lives in now."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from forged.daemon.loader import load_object

# (the path a user writes, where the object lives now)
PATHS = [
    ("forged.observers.audit:AuditLog", "forged.observers.audit:AuditLog"),
    ("forged.client:Client", "forged.client.methods:Client"),
    ("forged.client:AsyncClient", "forged.client.methods:AsyncClient"),
    ("forged.client:find_socket", "forged.client.methods:find_socket"),
    ("forged.models:Interaction", "forged.models:Interaction"),
    ("forged.models:Message", "forged.models:Message"),
    ("forged.consolidate:CurrentFact", "forged.consolidate.judgement:CurrentFact"),
    ("forged.consolidate:ProposedChange", "forged.consolidate.judgement:ProposedChange"),
    ("forged.consolidate:Proposer", "forged.consolidate.judgement:Proposer"),
    ("forged.cli:main", "forged.cli.commands:main"),
]


@pytest.mark.parametrize(("old", "new"), PATHS, ids=[old for old, _ in PATHS])
def test_an_old_path_names_the_object_itself(old: str, new: str) -> None:
    """Loaded as a config loads a plugin: the very object, not a copy or a wrapper."""
    assert load_object(old, "class") is load_object(new, "class")


def test_the_console_script_is_the_public_path() -> None:
    """`pip install` writes a `forged` script calling `forged.cli:main`."""
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"forged": "forged.cli:main"}
