"""The `forged` command line: its commands, how it shows answers to people, chat-history import
and the MCP server; everything here talks to the daemon through `forged.client`."""
