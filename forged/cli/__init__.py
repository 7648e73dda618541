"""The `forged` command line: its commands, how it shows answers to people, chat-history import
and the MCP server; everything here talks to the daemon through `forged.client`."""

from __future__ import annotations

from forged.cli.commands import main

__all__ = [
    "main",
]
