"""Current state: a scripted conversation in which states change (a move, a database switch, a
corrected name, a reversed preference, over five days), and whether the facts of the context
block answer its questions with only what is true now.

Three stages per distiller: consolidation off; supersession at distillation (the distiller sees
the facts it may replace); after one consolidation run. The fake LLM answers deterministically;
the bundled model (`--bundled`) shows whether a tiny model's judgement raises or lowers that.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.support.daemons import DaemonProcess, socket_client, wait_for_watermark, write_config
from tests.support.fakellm import FakeLLM, gold_key

SCOPE = "user:ana"
# (day, what the user says, the kind and text of the fact a faithful model distils from it)
# A data table, one row a line: the formatter would reflow its rows.
CONVERSATION: list[tuple[str, str, str, str]] = [
    ("2026-03-01", "I live in Lisbon.", "state", "The user lives in Lisbon."),
    ("2026-03-01", "Our service uses MySQL.", "state", "The service uses MySQL."),
    ("2026-03-01", "My name is Jon.", "state", "The user's name is Jon."),
    ("2026-03-02", "I prefer tea in the morning.", "preference", "The user prefers tea."),
    ("2026-03-02", "The service uses MySQL for storage of its data.", "state",
     "The service uses MySQL for storage."),
    ("2026-03-03", "We switched the service to Postgres.", "state", "The service uses Postgres."),
    ("2026-03-03", "I moved to Berlin.", "state", "The user lives in Berlin."),
    ("2026-03-04", "Correction: my name is John, not Jon.", "correction",
     "The user's name is John."),
    ("2026-03-05", "Actually I prefer coffee now.", "preference", "The user prefers coffee."),
]  # fmt: skip
# (question, the word of the current answer, the word of the stale one)
QUESTIONS = [
    ("Where does the user live?", "berlin", "lisbon"),
    ("Which database does the service use?", "postgres", "mysql"),
    ("What is the user's name?", "john", "jon"),
    ("What does the user prefer to drink?", "coffee", "tea"),
]
STAGES = ("off", "at distillation", "after a run")
BUDGET = 200  # tokens of the block: room for every fact of the scenario
MODEL_TIMEOUT = 3600.0  # seconds the bundled model may take for the whole scenario
_WORD = re.compile(r"\w+")


def interactions(scope: str = SCOPE) -> list[dict[str, Any]]:
    """The conversation as interactions, one per thing said, dated by its day."""
    return [
        {
            "id": f"{scope}-{n}",
            "scope": scope,
            "timestamp": f"{day}T10:{n:02d}:00Z",
            "messages": [{"role": "user", "text": said}],
        }
        for n, (day, said, _, _) in enumerate(CONVERSATION)
    ]


def gold() -> dict[str, list[dict[str, str]]]:
    """What the fake's `gold` behaviour answers for each thing said: its fact."""
    return {gold_key(said): [{"kind": kind, "text": fact}] for _, said, kind, fact in CONVERSATION}


async def _answers(client: httpx.AsyncClient) -> tuple[int, int]:
    """Questions whose block's facts hold only the current answer, and those holding a stale one."""
    current = stale = 0
    for question, now, before in QUESTIONS:
        params = {"q": question, "scope": SCOPE, "types": "fact", "budget_tokens": str(BUDGET)}
        block = (await client.get("/v1/context", params=params)).json()
        words = set(_WORD.findall(" ".join(i["text"] for i in block["items"]).casefold()))
        current += now in words and before not in words
        stale += before in words
    return current, stale


async def _stages(directory: Path, llm_url: str, bundled: bool, on: bool) -> list[tuple[int, int]]:
    """Distil the conversation in two halves (consolidation on or off); score after each stage."""
    settings = {"enabled": on, "min_new_facts": 1000, "check_interval": 3600.0}
    await trio.Path(directory).mkdir(parents=True)
    config = write_config(directory, llm_url, consolidate=settings)
    daemon = DaemonProcess(config, directory)
    said = interactions()
    await daemon.start(extra_args=("--bundled-llm",) if bundled else (), ready_timeout=600)
    try:
        async with socket_client(daemon.socket) as client:
            for part in (said[:5], said[5:]):
                last = (await client.post("/v1/interactions", json=part)).json()["last_seq"]
                await wait_for_watermark(client, last)
            scores = [await _answers(client)]
            if on:
                params = {"scope": SCOPE}
                response = await client.post("/v1/consolidate", params=params, timeout=None)
                response.raise_for_status()
                scores.append(await _answers(client))
    finally:
        await daemon.stop()
    return scores


async def measure(work: Path, bundled: bool) -> list[tuple[int, int]]:
    """(current-only answers, answers with a stale fact) at each stage."""
    with trio.fail_after(MODEL_TIMEOUT):
        return await _measure(work, bundled)


async def _measure(work: Path, bundled: bool) -> list[tuple[int, int]]:
    async with trio.open_nursery() as nursery:
        llm = FakeLLM()
        llm.default, llm.gold = "gold", gold()
        await nursery.start(llm.serve)
        off = await _stages(work / "off", llm.base_url, bundled, on=False)
        on = await _stages(work / "on", llm.base_url, bundled, on=True)
        nursery.cancel_scope.cancel()
    return off + on


def table(results: dict[str, list[tuple[int, int]]]) -> str:
    """One row per distiller: current-only answers (and answers with a stale fact) per stage."""
    n = len(QUESTIONS)
    lines = [
        "| distiller | "
        + " | ".join(f"consolidation {s}" if s == "off" else s for s in STAGES)
        + " |",
        "|---|" + "---|" * len(STAGES),
    ]
    for name, scores in results.items():
        cells = [f"{current}/{n} current only ({stale} stale)" for current, stale in scores]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdict(results: dict[str, list[tuple[int, int]]]) -> str:
    """Whether consolidation raised or lowered each distiller's current-state answers."""
    out = []
    for name, scores in results.items():
        (off, _), (_, _), (after, _) = scores
        change = "raises" if after > off else "lowers" if after < off else "does not change"
        out.append(
            f"- `{name}`: consolidation {change} the current-only answers ({off} → {after}"
            f" of {len(QUESTIONS)})."
        )
    return "\n".join(out)


def run(bundled: bool) -> dict[str, list[tuple[int, int]]]:
    """The scenario with the fake LLM, and with the bundled model when asked."""
    results = {}
    with tempfile.TemporaryDirectory(prefix="fc") as work:  # short: socket paths fit
        for name, model in [("fake (deterministic)", False)] + [("bundled", True)] * bundled:
            started = time.perf_counter()
            results[name] = trio.run(measure, Path(work) / name[:4], model)
            print(f"current state, {name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.currentstate", description=__doc__)
    parser.add_argument("--bundled", action="store_true", help="also with the bundled model")
    results = run(parser.parse_args(argv).bundled)
    print(table(results))
    print(verdict(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
