"""Shared fixtures: the fake LLM and a short temporary directory (daemons are in tests/daemons.py)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.fakellm import FakeLLM


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temporary directory: Unix socket paths must stay under 108 bytes."""
    with tempfile.TemporaryDirectory(prefix="fg") as path:
        yield Path(path)


@pytest.fixture
async def fake_llm(nursery: trio.Nursery) -> FakeLLM:
    """The fake OpenAI-compatible server, listening on loopback."""
    llm = FakeLLM()
    await nursery.start(llm.serve)
    return llm
