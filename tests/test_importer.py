"""Chat-history import: each format read from a small fixture, and `forged import` on a daemon."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import trio

from forged.config import Config
from forged.importer import _Progress, read_records
from tests.data import rows

FIXTURES = Path(__file__).parent / "fixtures"
CHATGPT = FIXTURES / "chatgpt-conversations.json"
CLAUDE = FIXTURES / "claude-conversations.json"
JSONL = FIXTURES / "turns.jsonl"
TIMEOUT = 60.0


def _turns(fmt: str, path: Path, scope: str | None = None) -> list[tuple[str | None, list[str]]]:
    """(timestamp, texts) of every turn read, in file order."""
    records = read_records(fmt, path.read_bytes(), scope)
    return [(r.interaction.timestamp, [m.text for m in r.interaction.messages])
            for r in records if r.interaction is not None]  # fmt: skip


def _problems(fmt: str, path: Path) -> list[str]:
    return [f"{r.where}: {r.problem}" for r in read_records(fmt, path.read_bytes())
            if r.interaction is None]  # fmt: skip


def test_chatgpt_follows_the_current_branch() -> None:
    """Only the branch that ends at `current_node` is read; hidden and empty messages are not."""
    assert _turns("chatgpt", CHATGPT) == [
        ("2023-11-14T22:15:00.500Z", ["Which database should the billing service use?",
                                      "PostgreSQL: you need JSONB and transactions."]),
        ("2023-11-14T22:18:20.000Z", ["And where should the backups go?",
                                      "To the object store, encrypted, every night."]),
        ("2023-11-15T22:15:00.000Z", ["We deploy on Tuesdays only.", "Noted: Tuesday deploys."]),
    ]  # fmt: skip


def test_chatgpt_bad_conversation_is_reported_by_position() -> None:
    """A conversation whose branch breaks is named by its index; the others are read."""
    assert _problems("chatgpt", CHATGPT) == [
        "$[1]: the branch from `current_node` breaks at node 'gone'"
    ]


def test_claude_turns_keep_their_times() -> None:
    """Claude.ai's `chat_messages`: human and assistant, text from `content` or `text`."""
    assert _turns("claude", CLAUDE) == [
        ("2024-03-01T09:00:05.000000Z", ["I prefer dark mode in every editor.", "Dark mode it is."]),
        ("2024-03-02T10:00:00.000000+00:00", ["Tabs, not spaces, in Go files.",
                                              "gofmt uses tabs anyway."]),
    ]  # fmt: skip
    assert _problems("claude", CLAUDE) == ["$[1]: no `chat_messages` list"]


def test_jsonl_lines_are_forged_interactions() -> None:
    """Bad lines are named by number; --scope replaces each line's scope."""
    records = read_records("jsonl", JSONL.read_bytes(), "user:ally")
    good = [r.interaction for r in records if r.interaction is not None]
    ids = [i.id or "" for i in good]
    assert ids[0] == "chat-7:turn-1"  # a line's own id is kept; the others get derived ones
    assert [i[:6] for i in ids[1:]] == ["jsonl:"] * 3
    assert {i.scope for i in good} == {"user:ally"}
    assert _problems("jsonl", JSONL) == [
        "line 3: Invalid enum value 'robot' - at `$.messages[0].role`",
        "line 4: JSON is malformed: invalid character (byte 4)",
    ]


def test_ids_are_derived_from_source_and_scope() -> None:
    """The same file gives the same ids; another scope gives others."""
    ids = [r.interaction.id for r in read_records("chatgpt", CHATGPT.read_bytes(), "a")
           if r.interaction]  # fmt: skip
    again = [r.interaction.id for r in read_records("chatgpt", CHATGPT.read_bytes(), "a")
             if r.interaction]  # fmt: skip
    other = [r.interaction.id for r in read_records("chatgpt", CHATGPT.read_bytes(), "b")
             if r.interaction]  # fmt: skip
    assert ids == again and len(set(ids)) == 3
    assert not set(ids) & set(other)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_in_place_on_a_terminal_and_every_few_seconds_elsewhere() -> None:
    """On a terminal progress is rewritten in place; on a pipe or file a line every few seconds,
    so a log shows how far an import got."""
    terminal, pipe = _Terminal(), io.StringIO()
    for out in (terminal, pipe):
        clock = _Clock()
        progress = _Progress(4_000_000, out, clock)
        for now, turns, read in ((0.1, 100, 100_000), (1.0, 200, 2_000_000), (6.0, 300, 3_000_000)):
            clock.now = now
            progress.update(turns, read)
        progress.done(400)
    assert terminal.getvalue() == (
        "\rimporting: 200 turns, 2.0 of 4.0 MB (50%)\rimporting: 300 turns, 3.0 of 4.0 MB (75%)"
        "\rimporting: 400 turns, 4.0 of 4.0 MB (100%)\n"
    )
    assert pipe.getvalue() == "importing: 300 turns, 3.0 of 4.0 MB (75%)\n"


async def _import(config: Config, *args: str) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "forged", "import", *args, "--socket", config.server.socket]
    return await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)


def _stored(config: Config) -> list[tuple[str, str, bytes]]:
    sql = "SELECT scope, timestamp, messages FROM interactions ORDER BY seq"
    return [(scope, at, bytes(messages)) for scope, at, messages in rows(config.store.path, sql)]


async def test_chatgpt_import_twice_stores_each_turn_once_with_its_date(daemon: Config) -> None:
    """The second import of the same export adds nothing; every turn keeps its own time."""
    first = await _import(daemon, "chatgpt", str(CHATGPT), "--scope", "user:alice")
    second = await _import(daemon, "chatgpt", str(CHATGPT), "--scope", "user:alice")
    name = CHATGPT.name
    assert first.stdout.decode() == f"imported {name}: 3 new turns, 0 already stored, 1 skipped\n"
    assert second.stdout.decode() == f"imported {name}: 0 new turns, 3 already stored, 1 skipped\n"
    assert first.stderr.decode() == (
        f"forged: {name} $[1]: the branch from `current_node` breaks at node 'gone'; skipped\n"
    )
    assert first.returncode == 0  # skipped records are reported, the rest is imported
    rows = _stored(daemon)
    assert [(scope, ts) for scope, ts, _ in rows] == [
        ("user:alice", "2023-11-14T22:15:00.500Z"),
        ("user:alice", "2023-11-14T22:18:20.000Z"),
        ("user:alice", "2023-11-15T22:15:00.000Z"),
    ]
    assert b"MongoDB" not in b"".join(messages for _, _, messages in rows)


async def test_jsonl_import_reports_what_the_daemon_refuses(daemon: Config) -> None:
    """A line the daemon rejects (a time without a zone) is named; its neighbours are stored."""
    done = await _import(daemon, "jsonl", str(JSONL))
    assert done.stdout.decode() == (
        f"imported {JSONL.name}: 3 new turns, 0 already stored, 3 skipped\n"
    )
    assert done.stderr.decode().splitlines()[-1] == (
        f"forged: {JSONL.name} line 6: timestamp: '2026-10-04 08:00' has no time zone"
        " (add Z or an offset); skipped"
    )
    assert len(_stored(daemon)) == 3


async def test_claude_import_into_the_default_scope(daemon: Config) -> None:
    """Without --scope an export goes to the default scope."""
    done = await _import(daemon, "claude", str(CLAUDE))
    assert done.stdout.decode().startswith(f"imported {CLAUDE.name}: 2 new turns,")
    assert {scope for scope, _, _ in _stored(daemon)} == {"default"}


async def test_a_file_that_is_not_an_export_is_one_line(daemon: Config, short_tmp: Path) -> None:
    """A file of the wrong shape stops the import with one line, before anything is pushed."""
    wrong = short_tmp / "conversations.json"
    wrong.write_text('{"not": "a list"}')
    done = await _import(daemon, "chatgpt", str(wrong))
    assert done.returncode == 1
    assert done.stderr.decode() == (
        "forged: the file is not an export's conversations.json (a JSON array)\n"
    )


async def test_a_file_that_cannot_be_read_is_one_line(daemon: Config, short_tmp: Path) -> None:
    """A missing file is named, with the reason."""
    done = await _import(daemon, "claude", str(short_tmp / "missing.json"))
    assert done.returncode == 1
    assert done.stderr.decode() == (
        f"forged: cannot read {short_tmp / 'missing.json'}: No such file or directory\n"
    )
