"""The recall commands as a user runs them: a real `forged` process talking to the daemon."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from forged.config import Config, load_config
from forged.daemon.runner import Running
from tests.support.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.support.data import write_rows
from tests.support.fakellm import FakeLLM

CONVERSATION = [
    {
        "id": f"chat-42:turn-{n}",
        "scope": "user:alice",
        "session": "chat-42",
        "messages": [
            {"role": "user", "name": "alice", "text": text},
            {"role": "assistant", "text": "Agreed."},
        ],
    }
    for n, text in enumerate(
        [
            "Let's use PostgreSQL, we need JSONB.",
            "Deploys should happen on Tuesdays.",
            "Please answer me in French from now on.",
        ],
        start=1,
    )
]


class Daemon:
    """The daemon in this process, and a way to run the command line against it."""

    def __init__(self, config: Config, api: Running, client: httpx.AsyncClient) -> None:
        self.config = config
        self.api = api
        self.client = client

    async def forged(
        self, *args: str, stdin: int | None = subprocess.DEVNULL
    ) -> subprocess.CompletedProcess[bytes]:
        """`forged ARGS --socket S`, with its exit status, output and errors."""
        command = [sys.executable, "-m", "forged", *args, "--socket", self.config.server.socket]
        return await trio.run_process(
            command, stdin=stdin, capture_stdout=True, capture_stderr=True, check=False
        )


@pytest.fixture
async def daemon(short_tmp: Path, fake_llm: FakeLLM) -> AsyncIterator[Daemon]:
    """A daemon that has distilled the conversation, one fact per interaction."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(60):
        async with running_daemon(config) as api, socket_client(config.server.socket) as client:
            daemon = Daemon(config, api, client)
            conversation = short_tmp / "conversation.json"
            conversation.write_text(json.dumps(CONVERSATION))
            pushed = await daemon.forged("push", str(conversation))
            assert pushed.returncode == 0, pushed.stderr
            await wait_for_watermark(client, len(CONVERSATION), hub=api.hub)
            yield daemon


async def test_pushed_conversation_is_found_by_search(daemon: Daemon) -> None:
    """Once distilled, the conversation comes back from `forged search`: the turn, then its fact."""
    done = await daemon.forged("search", "PostgreSQL JSONB", "--scope", "user:alice")
    assert done.returncode == 0, done.stderr
    turn, fact = done.stdout.decode().splitlines()[:2]
    assert turn.endswith("alice: Let's use PostgreSQL, we need JSONB. assistant: Agreed.")
    assert "  interaction  20" in turn
    assert fact.endswith("Recorded: alice: Let's use PostgreSQL, we need JSONB.")
    assert "  state        20" in fact
    only = await daemon.forged(
        "search",
        "PostgreSQL",
        "--scope",
        "user:alice",
        "--types",
        "fact",
        "--since",
        "2020-01-01",
        "--json",
    )
    assert {r["type"] for r in json.loads(only.stdout)} == {"fact"}
    later = await daemon.forged(
        "search", "PostgreSQL", "--scope", "user:alice", "--since", "2999-01-01"
    )
    assert (later.returncode, later.stdout) == (0, b"")


async def test_pushed_conversation_shows_up_in_context(daemon: Daemon) -> None:
    """`forged context` prints the quoted memory block holding what was said about the database.

    The fake's fact quotes the turn, so the block keeps one of the two: the packing skips an item
    that adds next to no new words."""
    done = await daemon.forged(
        "context", "which database, PostgreSQL?", "--scope", "user:alice", "--budget", "300"
    )
    assert done.returncode == 0, done.stderr
    block = done.stdout.decode()
    assert block.startswith("<memory>\nQuoted notes recalled from earlier conversations.")
    assert "] alice: Let's use PostgreSQL, we need JSONB." in block
    assert "Recorded: alice" not in block
    assert block.rstrip().endswith("</memory>")


async def test_search_json_and_kind(daemon: Daemon) -> None:
    """--json prints the results as the API gives them; --kind summary keeps only summaries."""
    done = await daemon.forged(
        "search", "recorded exchanges", "--scope", "user:alice", "--kind", "summary", "--json"
    )
    results = json.loads(done.stdout)
    assert results and {r["type"] for r in results} == {"summary"}


async def test_search_without_a_match_says_so(daemon: Daemon) -> None:
    """No match: nothing on standard output, one line on standard error, success."""
    done = await daemon.forged("search", "kubernetes", "--scope", "user:alice")
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"no memory matches\n")


async def test_search_bad_limit_shows_the_daemons_words(daemon: Daemon) -> None:
    """A limit out of range is refused with the parameter named."""
    done = await daemon.forged("search", "postgresql", "--limit", "0")
    assert done.returncode == 1
    assert (
        done.stderr.decode()
        == "forged: 400 invalid_parameter: `limit` must be an integer from 1 to 100; got '0'\n"
    )


async def test_facts_pages_through_everything(daemon: Daemon) -> None:
    """`forged facts --json` follows the cursor across pages: every fact once, in id order."""

    def insert(conn: sqlite3.Connection) -> None:
        conn.executemany(
            "INSERT INTO facts (kind, text, norm, scope, batch_id, first_seq, last_seq, first_at,"
            " last_at, created_at, last_seen_at)"
            " VALUES ('state', ?, ?, 'bulk', 'b', 1, 1, '2026-01-01', '2026-01-01', '2026-01-01',"
            " '2026-01-01')",
            ((f"Bulk fact {n}.", f"bulk fact {n}") for n in range(250)),
        )

    await write_rows(daemon.api.store.path, insert)
    done = await daemon.forged("facts", "--scope", "bulk", "--json")
    ids = [json.loads(line)["id"] for line in done.stdout.splitlines()]
    assert len(ids) == 250 and ids == sorted(set(ids))
    readable = (await daemon.forged("facts", "--all-scopes")).stdout.decode().splitlines()
    assert len(readable) == 253
    assert readable[0].split()[1:3] == ["user:alice", "state"]


async def test_every_listing_follows_one_scope_rule(daemon: Daemon) -> None:
    """Facts, summaries, dead letters and a fact by id: the scope named, `default` when none
    is, every scope only with `all_scopes=true`; a fact of another scope is not found."""
    await wait_for_watermark(daemon.client, 3, hub=daemon.api.hub)

    async def listed(path: str, key: str, **query: str) -> set[str]:
        answer = await daemon.client.get(path, params=query)
        assert answer.status_code == 200, answer.text
        return {row["scope"] for row in answer.json()[key]}

    for path, key in (("/v1/facts", "facts"), ("/v1/summaries", "summaries")):
        assert await listed(path, key) == set()
        assert await listed(path, key, scope="user:alice") == {"user:alice"}
        assert await listed(path, key, all_scopes="true") == {"user:alice"}
        both = await daemon.client.get(path, params={"scope": "a", "all_scopes": "true"})
        assert both.json()["error"]["message"] == "give `scope` or `all_scopes=true`, not both"
    assert await listed("/v1/dead-letters", "dead_letters", all_scopes="true") == set()
    fact = (await daemon.client.get("/v1/facts", params={"scope": "user:alice"})).json()
    path = f"/v1/facts/{fact['facts'][0]['id']}"
    for query, status in (
        ({}, 404),
        ({"scope": "user:bob"}, 404),
        ({"scope": "user:alice"}, 200),
        ({"all_scopes": "true"}, 200),
    ):
        assert (await daemon.client.get(path, params=query)).status_code == status, query
    other = await daemon.client.get(path, params={"scope": "user:bob"})
    assert other.json()["error"]["message"] == f"no fact with id '{fact['facts'][0]['id']}'"
    shown = await daemon.forged("fact", str(fact["facts"][0]["id"]), "--scope", "user:alice")
    assert shown.returncode == 0, shown.stderr


async def test_forget_without_a_terminal_refuses(daemon: Daemon) -> None:
    """No terminal to ask on and no --yes: a clear refusal, and nothing is erased."""
    done = await daemon.forged("forget", "user:alice")
    assert done.returncode == 1
    assert done.stderr.decode() == (
        "forged: refusing to erase scope 'user:alice' without confirmation: no terminal to ask on;"
        " pass --yes\n"
    )
    assert (await daemon.client.get("/v1/status")).json()["log"]["count"] == 3


@pytest.mark.parametrize(("answer", "erased"), [(b"y\n", True), (b"\n", False), (b"no\n", False)])
async def test_forget_asks_on_a_terminal(daemon: Daemon, answer: bytes, erased: bool) -> None:
    """On a terminal the command asks; only a yes erases."""
    primary, secondary = os.openpty()
    try:
        os.write(primary, answer)
        done = await daemon.forged("forget", "user:alice", stdin=secondary)
    finally:
        os.close(primary)
        os.close(secondary)
    assert "Erase all memory of scope 'user:alice'" in done.stderr.decode()
    assert done.returncode == (0 if erased else 1)
    count = (await daemon.client.get("/v1/status")).json()["log"]["count"]
    assert count == (0 if erased else 3)


async def test_forget_yes_erases_and_reports(daemon: Daemon) -> None:
    """--yes erases without asking and prints what went."""
    done = await daemon.forged("forget", "user:alice", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().startswith("erased scope 'user:alice': 3 interactions, ")
    assert done.stdout.decode().endswith(" summaries, 3 facts\n")
    search = await daemon.forged("search", "PostgreSQL", "--scope", "user:alice")
    assert search.stdout == b""


async def test_export_writes_conversations_summaries_and_facts_as_json_lines(
    daemon: Daemon, short_tmp: Path
) -> None:
    """Every interaction, summary and fact, one JSON object a line with its type; --scope
    narrows it."""
    await daemon.client.post(
        "/v1/interactions", json={**CONVERSATION[0], "id": "other", "scope": "user:bob"}
    )
    await wait_for_watermark(daemon.client, 4, hub=daemon.api.hub)
    assert (await daemon.forged("export")).stdout == b""  # the default scope: nothing there
    everything = await daemon.forged("export", "--all-scopes")
    lines = [json.loads(line) for line in everything.stdout.splitlines()]
    assert {(row["type"], row["scope"]) for row in lines} == {
        ("interaction", "user:alice"),
        ("interaction", "user:bob"),
        ("summary", "user:alice"),
        ("fact", "user:alice"),
        ("summary", "user:bob"),
        ("fact", "user:bob"),
    }
    assert sum(row["type"] == "fact" for row in lines) == 4
    output = short_tmp / "alice.jsonl"
    done = await daemon.forged("export", "--scope", "user:alice", "--output", str(output))
    alice = [json.loads(line) for line in output.read_text().splitlines()]
    assert {row["scope"] for row in alice} == {"user:alice"}
    assert sum(row["type"] == "interaction" for row in alice) == 3
    assert done.stderr.decode() == (
        f"exported 3 interactions, {len(alice) - 6} summaries and 3 facts to {output}\n"
    )


async def test_search_ranks_results_with_a_share_of_the_best(daemon: Daemon) -> None:
    """Each result line starts with its rank and how close it comes to the best, in percent,
    not a raw score."""
    done = await daemon.forged("search", "PostgreSQL JSONB", "--scope", "user:alice")
    found = (
        await daemon.client.get(
            "/v1/search", params={"q": "PostgreSQL JSONB", "scope": "user:alice"}
        )
    ).json()["results"]
    scores = [r["score"] for r in found]
    lines = done.stdout.decode().splitlines()
    assert [line[:9] for line in lines] == [
        f"{n:>3}. {round(100 * s / scores[0]):>3}%" for n, s in enumerate(scores, start=1)
    ]
    assert lines[0].startswith("  1. 100%") and len(lines) >= 2


async def test_fact_by_id_prints_text_and_names_the_scope_rule(daemon: Daemon) -> None:
    """`forged fact ID` prints a line like `forged facts`; without --scope it looks in
    `default` and says how to look elsewhere; --json keeps the raw answer."""
    facts = await daemon.forged("facts", "--scope", "user:alice")
    first = facts.stdout.decode().splitlines()[0]
    fact_id = first.split()[0]
    shown = await daemon.forged("fact", fact_id, "--scope", "user:alice")
    assert (shown.returncode, shown.stdout.decode().splitlines()) == (0, [first])
    every = await daemon.forged("fact", fact_id, "--all-scopes")
    assert every.stdout.decode().splitlines() == [first]
    raw = await daemon.forged("fact", fact_id, "--scope", "user:alice", "--json")
    assert json.loads(raw.stdout)["fact"]["id"] == int(fact_id)
    missing = await daemon.forged("fact", fact_id)
    assert missing.returncode == 1
    assert missing.stderr.decode() == (
        f"forged: no fact {fact_id} in scope 'default'; name its scope with --scope S,"
        " or look in every scope with --all-scopes\n"
    )


async def test_interactions_json_is_read_back_by_import(daemon: Daemon, short_tmp: Path) -> None:
    """`forged interactions --json` into a file, then `forged import jsonl` of it into another
    scope: every turn is stored again, and a second import adds nothing."""
    listed = await daemon.forged("interactions", "--scope", "user:alice", "--json")
    dump = short_tmp / "alice.jsonl"
    dump.write_bytes(listed.stdout)
    assert len(listed.stdout.splitlines()) == 3
    done = await daemon.forged("import", "jsonl", str(dump), "--scope", "user:copy")
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.decode() == "imported alice.jsonl: 3 new turns, 0 already stored, 0 skipped\n"
    )
    again = await daemon.forged("import", "jsonl", str(dump), "--scope", "user:copy")
    assert again.stdout.decode().startswith("imported alice.jsonl: 0 new turns, 3 already stored")
    copied = await daemon.forged("interactions", "--scope", "user:copy", "--json")
    texts = [[m["text"] for m in json.loads(x)["messages"]] for x in copied.stdout.splitlines()]
    assert texts == [
        [m["text"] for m in json.loads(x)["messages"]] for x in listed.stdout.splitlines()
    ]


async def test_an_import_that_skips_everything_fails(daemon: Daemon, short_tmp: Path) -> None:
    """A file of which no record can be read: each is named, then the import fails (exit 1)."""
    export = short_tmp / "facts.jsonl"
    export.write_text('{"type": "fact", "id": 1}\n{"nothing": "here"}\n')
    done = await daemon.forged("import", "jsonl", str(export))
    assert done.returncode == 1
    errors = done.stderr.decode().splitlines()
    assert errors[0] == "forged: facts.jsonl line 1: a 'fact' line, not an interaction; skipped"
    assert errors[-1] == (
        "forged: nothing imported from facts.jsonl: every one of its 2 records was skipped"
        " (the reasons are above)"
    )


async def test_output_into_a_closed_pipe_ends_quietly(daemon: Daemon, short_tmp: Path) -> None:
    """`forged interactions | head -1` through a real pipe: head's line, and from forged no
    traceback, only the exit status a shell gives a closed pipe."""
    many = [{**CONVERSATION[0], "id": f"bulk-{n}"} for n in range(300)]
    assert (await daemon.client.post("/v1/interactions", json=many)).status_code == 202
    forged = f"{sys.executable} -m forged interactions --scope user:alice --socket {daemon.config.server.socket}"
    done = await trio.run_process(
        ["bash", "-c", f"set -o pipefail; {forged} | head -n 1"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert len(done.stdout.decode().splitlines()) == 1
    assert done.stderr.decode() == ""
    assert done.returncode == 141
