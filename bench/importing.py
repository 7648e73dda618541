"""Import: `forged import` of a large generated ChatGPT export, its peak RSS and its time."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import trio

from bench.report import Goal, Row
from bench.runner import running
from bench.sizes import Context

NO_LLM = "http://127.0.0.1:9/v1"  # distillation is off: the import is measured alone
MESSAGES = 10  # per conversation: five turns
FILLER = "lorem ipsum dolor sit amet " * 8  # about 200 bytes of text a message
RSS_GOAL_MIB = 200  # the importer's peak, whatever the export's size
READ_ONLY = (
    "import sys, time\nfrom forged.cli.importer import iter_records\n"
    "began = time.perf_counter()\n"
    "n = sum(1 for r in iter_records('chatgpt', open(sys.argv[1], 'rb')) if r.interaction)\n"
    "print(n, time.perf_counter() - began)"
)  # the records read, without a daemon: what parsing alone costs


def _conversation(n: int) -> dict[str, object]:
    """One conversation as ChatGPT exports it: a `mapping` tree of one branch."""
    mapping: dict[str, object] = {}
    parent = None
    for k in range(MESSAGES):
        node = f"m{n}-{k}"
        mapping[node] = {
            "id": node,
            "parent": parent,
            "children": [],
            "message": {
                "id": node,
                "author": {"role": ("user", "assistant")[k % 2], "metadata": {}},
                "create_time": 1_700_000_000 + n * 60 + k,
                "status": "finished_successfully",
                "content": {"content_type": "text", "parts": [f"message {k} of {n}: {FILLER}"]},
                "metadata": {"model_slug": "gpt-4", "finish_details": {"type": "stop"}},
            },
        }
        parent = node
    return {
        "title": f"conversation {n}",
        "create_time": 1_700_000_000.0 + n * 60,
        "conversation_id": f"conv-{n}",
        "current_node": parent,
        "mapping": mapping,
    }


def write_export(path: Path, size: int) -> int:
    """An export of about `size` bytes, written a conversation at a time; its turns."""
    conversations = written = 0
    with open(path, "w", encoding="utf-8") as out:
        out.write("[")
        while written < size:
            text = ("," if conversations else "") + json.dumps(_conversation(conversations))
            written += out.write(text)
            conversations += 1
        out.write("]")
    return conversations * MESSAGES // 2


def _import(socket: str, export: Path) -> tuple[float, float, str]:
    """Run `forged import` as a child; its peak RSS (MiB), its time and its report line."""
    command = [sys.executable, "-m", "forged", "import", "chatgpt", str(export), "--socket", socket]
    read, write = os.pipe()
    began = time.perf_counter()
    pid = os.posix_spawn(
        command[0], command, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, write, 1)]
    )
    os.close(write)
    with os.fdopen(read) as out:
        report = out.read()
    _, status, usage = os.wait4(pid, 0)
    elapsed = time.perf_counter() - began
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"import: forged import failed: {report}")
    return usage.ru_maxrss / 1024, elapsed, report.strip()


async def measure(ctx: Context) -> list[Row]:
    size = ctx.size.import_bytes
    export = ctx.work / "conversations.json"
    turns = await trio.to_thread.run_sync(write_export, export, size)
    megabytes = export.stat().st_size / 2**20
    async with running(ctx.work / "import", NO_LLM, distill={"enabled": False}) as daemon:
        rss, seconds, report = await trio.to_thread.run_sync(_import, daemon.socket, export)
    if report != f"imported {export.name}: {turns} new turns, 0 already stored, 0 skipped":
        raise RuntimeError(f"import: {report!r}, expected {turns} new turns")
    done = await trio.run_process(
        [sys.executable, "-c", READ_ONLY, str(export)], capture_stdout=True
    )
    read_turns, read_seconds = done.stdout.split()
    if int(read_turns) != turns:
        raise RuntimeError(f"import: read {read_turns} turns, expected {turns}")
    export.unlink()
    label = f"{megabytes:,.0f} MB ChatGPT export, {turns:,} turns"
    return [
        Row(
            f"import: peak RSS of `forged import`, {label}",
            rss,
            "MiB",
            "the export's size",
            megabytes,
            goal=Goal(RSS_GOAL_MIB / megabytes, at_least=False),
        ),  # under 200 MiB
        Row(
            f"import: time of `forged import` into a daemon, {label}",
            seconds,
            "s",
            "reading its records alone, no daemon",
            float(read_seconds),
        ),
    ]
