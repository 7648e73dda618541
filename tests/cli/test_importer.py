"""Chat-history import: each format read from a small fixture, and `forged import` on a daemon."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from forged.cli.importer import READ_BUFFER, _Progress, iter_records, read_records
from forged.config import Config
from forged.errors import ClientError
from tests.support.data import rows

FIXTURES = Path(__file__).parents[1] / "fixtures"
CHATGPT = FIXTURES / "chatgpt-conversations.json"
CLAUDE = FIXTURES / "claude-conversations.json"
JSONL = FIXTURES / "turns.jsonl"
TIMEOUT = 60.0


def _turns(fmt: str, path: Path, scope: str | None = None) -> list[tuple[str | None, list[str]]]:
    """(timestamp, texts) of every turn read, in file order."""
    records = read_records(fmt, path.read_bytes(), scope)
    return [
        (r.interaction.timestamp, [m.text for m in r.interaction.messages])
        for r in records
        if r.interaction is not None
    ]


def _problems(fmt: str, path: Path) -> list[str]:
    return [
        f"{r.where}: {r.problem}"
        for r in read_records(fmt, path.read_bytes())
        if r.interaction is None
    ]


def test_chatgpt_follows_the_current_branch() -> None:
    """Only the branch that ends at `current_node` is read; hidden and empty messages are not."""
    assert _turns("chatgpt", CHATGPT) == [
        (
            "2023-11-14T22:15:00.500Z",
            [
                "Which database should the billing service use?",
                "PostgreSQL: you need JSONB and transactions.",
            ],
        ),
        (
            "2023-11-14T22:18:20.000Z",
            ["And where should the backups go?", "To the object store, encrypted, every night."],
        ),
        ("2023-11-15T22:15:00.000Z", ["We deploy on Tuesdays only.", "Noted: Tuesday deploys."]),
    ]


def test_chatgpt_bad_conversation_is_reported_by_position() -> None:
    """A conversation whose branch breaks is named by its index; the others are read."""
    assert _problems("chatgpt", CHATGPT) == [
        "$[1]: the branch from `current_node` breaks at node 'gone'"
    ]


def test_claude_turns_keep_their_times() -> None:
    """Claude.ai's `chat_messages`: human and assistant, text from `content` or `text`."""
    assert _turns("claude", CLAUDE) == [
        (
            "2024-03-01T09:00:05.000000Z",
            ["I prefer dark mode in every editor.", "Dark mode it is."],
        ),
        (
            "2024-03-02T10:00:00.000000+00:00",
            ["Tabs, not spaces, in Go files.", "gofmt uses tabs anyway."],
        ),
    ]
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
    ids = [
        r.interaction.id
        for r in read_records("chatgpt", CHATGPT.read_bytes(), "a")
        if r.interaction
    ]
    again = [
        r.interaction.id
        for r in read_records("chatgpt", CHATGPT.read_bytes(), "a")
        if r.interaction
    ]
    other = [
        r.interaction.id
        for r in read_records("chatgpt", CHATGPT.read_bytes(), "b")
        if r.interaction
    ]
    assert ids == again and len(set(ids)) == 3
    assert not set(ids) & set(other)


def _chatgpt(
    conversation_id: str | None, texts: list[str], *, ids: bool = True, **message: Any
) -> dict[str, Any]:
    """A ChatGPT conversation of alternating user and assistant messages, one branch; the
    last message's fields are replaced by `message`."""
    mapping: dict[str, Any] = {}
    parent = None
    for n, text in enumerate(texts):
        node = f"m{n}"
        body: dict[str, Any] = {
            "author": {"role": ("user", "assistant")[n % 2]},
            "create_time": 1700000000 + n,
            "metadata": {},
            "content": {"content_type": "text", "parts": [text]},
        }
        if ids:
            body["id"] = node
        mapping[node] = {"parent": parent, "message": body}
        parent = node
    mapping[parent or ""]["message"].update(message)
    conversation = {"current_node": parent, "mapping": mapping}
    return conversation if conversation_id is None else {**conversation, "id": conversation_id}


def _encode(conversations: Any) -> bytes:
    return json.dumps(conversations).encode()


def _read(fmt: str, data: bytes) -> tuple[list[list[str]], list[str]]:
    """The texts of each turn read, and each problem with its position."""
    records = read_records(fmt, data)
    return (
        [[m.text for m in r.interaction.messages] for r in records if r.interaction],
        [f"{r.where}: {r.problem}" for r in records if r.interaction is None],
    )


def test_chatgpt_messages_without_ids_are_told_apart_by_position() -> None:
    """Turns whose messages carry no `id` are three turns, not one id three times."""
    data = _encode([_chatgpt("c1", ["q1", "a1", "q2", "a2", "q3", "a3"], ids=False)])
    turns, problems = _read("chatgpt", data)
    assert (turns, problems) == ([["q1", "a1"], ["q2", "a2"], ["q3", "a3"]], [])
    ids = {r.interaction.id for r in read_records("chatgpt", data) if r.interaction}
    assert len(ids) == 3


def test_claude_messages_without_uuids_are_told_apart_by_position() -> None:
    """The same for Claude.ai messages without `uuid`, and conversations without one."""
    chat = [{"sender": ("human", "assistant")[n % 2], "text": f"t{n}"} for n in range(4)]
    data = _encode([{"chat_messages": chat}, {"chat_messages": chat}])
    turns, problems = _read("claude", data)
    assert (turns, problems) == ([["t0", "t1"], ["t2", "t3"]] * 2, [])


def test_a_turn_read_twice_from_one_file_is_a_skip_at_its_position() -> None:
    """A second conversation with the same ids is reported where it is, not counted as stored."""
    twice = _chatgpt("same", ["q", "a"])
    turns, problems = _read("chatgpt", _encode([twice, _chatgpt("other", ["x", "y"]), twice]))
    assert turns == [["q", "a"], ["x", "y"]]
    assert len(problems) == 1
    assert re.fullmatch(
        r"\$\[2\]: turn chatgpt:[0-9a-f]{32} was read before in this file", problems[0]
    ), problems


DEEP = 100_000  # levels of nesting in the hostile file
HOSTILE: list[tuple[Any, str]] = [
    (
        _chatgpt("h", ["q", "a"], author="assistant"),
        "$[1].mapping['m1'].message.author: expected an object, got a string",
    ),
    (
        _chatgpt("h", ["q", "a"], content="a"),
        "$[1].mapping['m1'].message.content: expected an object, got a string",
    ),
    (
        _chatgpt("h", ["q", "a"], content=["a"]),
        "$[1].mapping['m1'].message.content: expected an object, got a list",
    ),
    (
        _chatgpt("h", ["q", "a"], content={"content_type": "text", "parts": 5}),
        "$[1].mapping['m1'].message.content.parts: expected a list, got an integer",
    ),
    (
        _chatgpt("h", ["q", "a"], metadata=[1]),
        "$[1].mapping['m1'].message.metadata: expected an object, got a list",
    ),
    (
        _chatgpt("h", ["q", "a"], create_time=1e20),
        "$[1].mapping['m1'].message.create_time: 1e+20 is not a time forged can store",
    ),
    (
        _chatgpt("h", ["q", "a"], create_time=-1e15),
        "$[1].mapping['m1'].message.create_time: -1000000000000000.0 is not a time forged can store",
    ),
    (
        _chatgpt("h", ["q", "a"], create_time=253402300800),
        "$[1].mapping['m1'].message.create_time: 253402300800 is not a time forged can store",
    ),
    (
        {"current_node": "m0", "mapping": {"m0": {"parent": ["x"], "message": None}}},
        "$[1].mapping['m0'].parent: expected a string, got a list",
    ),
    (
        {"current_node": "m0", "mapping": {"m0": {"parent": {"x": 1}, "message": None}}},
        "$[1].mapping['m0'].parent: expected a string, got an object",
    ),
    ("[" * DEEP + "]" * DEEP, "$[1]: nested deeper than 64 levels"),
    (
        {"title": "deep", "mapping": json.loads("[" * 70 + "]" * 70)},
        "$[1]: nested deeper than 64 levels",
    ),
]


@pytest.mark.parametrize(("hostile", "problem"), HOSTILE)
def test_a_hostile_conversation_is_one_line_and_the_rest_is_read(
    hostile: Any, problem: str
) -> None:
    """Wrong types, impossible times, deep nesting: one line naming the position; the
    conversations around it are read."""
    middle = hostile.encode() if isinstance(hostile, str) else _encode(hostile)
    data = b"[" + _encode(_chatgpt("g0", ["q0", "a0"])) + b"," + middle + b","
    data += _encode(_chatgpt("g2", ["q2", "a2"])) + b"]"
    assert _read("chatgpt", data) == ([["q0", "a0"], ["q2", "a2"]], [problem])


def test_a_claude_sender_of_the_wrong_type_is_one_line() -> None:
    """Claude.ai's `sender` a list: the position of the message, and the rest read."""
    good = {"uuid": "g", "chat_messages": [{"sender": "human", "text": "hi", "uuid": "m"}]}
    bad = {"uuid": "b", "chat_messages": [{"sender": ["human"], "text": "hi"}]}
    assert _read("claude", _encode([good, bad])) == (
        [["hi"]],
        ["$[1].chat_messages[0].sender: expected a string, got a list"],
    )


class _Endless(io.RawIOBase):
    """A file of `size` bytes of `fill` after `head`, made as it is read; counts what was read."""

    def __init__(self, head: bytes, fill: bytes, size: int) -> None:
        self.head, self.fill, self.size, self.position = head, fill, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.position = offset
        return offset

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self.size - self.position)
        start = self.position
        chunk = (self.head[start:] + self.fill * (n // len(self.fill) + 2))[:n]
        buffer[:n] = chunk
        self.position += n
        return n


def test_a_large_file_that_is_not_json_fails_at_once() -> None:
    """500 MB of something else fail after the first block, not after reading it whole."""
    stream = _Endless(b"", b"not json ", 500_000_000)
    with pytest.raises(ClientError, match=r"^the file is not JSON: "):
        list(iter_records("chatgpt", stream))
    assert stream.position <= 2 * READ_BUFFER


def test_an_export_is_read_as_a_stream() -> None:
    """The first turn is read after a few blocks of a large export, not after all of it."""
    one = _encode(_chatgpt(None, ["q", "a"]))
    stream = _Endless(b"[", one + b",", 500_000_000)
    first = next(iter_records("chatgpt", stream))
    assert first.interaction is not None and stream.position <= 2 * READ_BUFFER


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
