"""`forged mcp` end to end: the MCP SDK's own stdio client, the server as a child, a real daemon."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import mcp_types
import pytest
import trio
from mcp import ClientSession, StdioServerParameters, stdio_client

from forged.config import Config
from tests.daemons import socket_client, wait_for_watermark

TIMEOUT = 60.0  # seconds for a whole scenario: the server child imports pydantic and the SDK
TOOLS = {"recall", "search", "remember", "list_facts"}


@asynccontextmanager
async def mcp_session(config: Config, *args: str, **env: str) -> AsyncIterator[ClientSession]:
    """`forged mcp` started the way an MCP host starts it, with an initialized session."""
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "forged", "mcp", "--socket", config.server.socket, *args],
        env=env,
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def _text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


async def test_tools_are_described_and_take_no_scope(daemon: Config) -> None:
    """Four tools, each with a description and an input schema; none has a `scope` argument."""
    async with mcp_session(daemon) as session:
        tools = (await session.list_tools()).tools
    assert {t.name for t in tools} == TOOLS
    for tool in tools:
        assert tool.description and len(tool.description) > 40, tool.name
        assert tool.input_schema["type"] == "object"
        assert "scope" not in tool.input_schema.get("properties", {}), tool.name
    recall = next(t for t in tools if t.name == "recall")
    assert recall.input_schema["required"] == ["query"]
    assert "description" in recall.input_schema["properties"]["query"]


async def test_remember_then_recall_search_and_list(daemon: Config) -> None:
    """What `remember` stores is distilled and comes back through recall, search and list_facts."""
    async with mcp_session(daemon, "--scope", "user:alice") as session:
        stored = await session.call_tool(
            "remember",
            {"user": "Let's use PostgreSQL as our database.", "assistant": "Agreed."},
        )
        assert not stored.is_error and _text(stored) == "Stored as #1."
        async with socket_client(daemon.server.socket) as http:
            await wait_for_watermark(http, 1)
        recalled = _text(await session.call_tool("recall", {"query": "which database"}))
        found = _text(await session.call_tool("search", {"query": "database", "limit": 5}))
        facts = _text(await session.call_tool("list_facts", {}))
    assert recalled.startswith("<memory>") and "PostgreSQL as our database" in recalled
    assert found.startswith("- [interaction, ") and "- [state, " in found  # said, then kept
    assert facts.startswith("- [state, ") and "PostgreSQL as our database" in facts


async def test_a_note_is_stored_once(daemon: Config) -> None:
    """A note is an interaction of its own; remembering nothing is a tool error that says why."""
    async with mcp_session(daemon, FORGED_SCOPE="user:alice") as session:
        first = await session.call_tool("remember", {"note": "Alice prefers dark mode."})
        empty = await session.call_tool("remember", {"note": "  "})
    assert _text(first) == "Stored as #1."
    assert empty.is_error
    assert "give a `note`, or the `user` text of an exchange" in _text(empty)


async def test_the_scope_is_fixed_at_start(daemon: Config) -> None:
    """An agent bound to alice never sees bob's memory, even when it asks for bob's scope."""
    async with socket_client(daemon.server.socket) as http:
        text = "Bob's database password rotation is on Fridays."
        bob = {"scope": "user:bob", "messages": [{"role": "user", "text": text}]}
        assert (await http.post("/v1/interactions", json=bob)).status_code == 202
        await wait_for_watermark(http, 1)
    async with mcp_session(daemon, FORGED_SCOPE="user:alice") as session:
        plain = await session.call_tool("search", {"query": "database password Fridays"})
        asked = await session.call_tool(
            "search", {"query": "database password Fridays", "scope": "user:bob"}
        )
        listed = await session.call_tool("list_facts", {"scope": "user:bob"})
    assert _text(plain) == "No memory matches this query."
    for result in (asked, listed):
        assert "Fridays" not in _text(result)


async def test_a_daemon_that_is_down_is_a_tool_error(daemon: Config, short_tmp: Path) -> None:
    """No daemon on the socket: the tool answers with an error naming it; the server lives on."""
    gone = daemon.server.socket + ".gone"
    async with mcp_session(daemon, "--socket", gone) as session:
        result = await session.call_tool("recall", {"query": "anything"})
        tools = await session.list_tools()
    assert result.is_error
    assert f"cannot reach forged at {gone}" in _text(result)
    assert {t.name for t in tools.tools} == TOOLS


@pytest.mark.integration  # a child process
async def test_without_the_extra_the_command_says_what_to_install() -> None:
    """`forged mcp` without the mcp package: one line naming the extra, exit 1."""
    hide = "import sys; sys.modules['mcp'] = None; from forged.cli import main; sys.exit(main(['mcp']))"
    done = await trio.run_process([sys.executable, "-c", hide], capture_stderr=True, check=False)
    assert done.returncode == 1
    assert done.stderr.decode().startswith(
        "forged: `forged mcp` needs the mcp extra: pip install 'forged[mcp]' ("
    )
