"""`python -m bench.smallmodel`: the bundled model distils LoCoMo sessions; how well, per style.

The first sessions of LoCoMo conversation 0 are pushed through the socket, one turn per
interaction, dated by their session; the daemon distils them with the bundled model (run here
as it runs under `forged serve --bundled-llm`) in each style; the figures come from its
database. Prints a markdown table for docs/quality.md.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import trio

from bench import quality
from bench.corpus import locomo_path
from bench.grounding import locomo_sessions
from bench.runner import running, wait_drained
from forged.daemon.bundled import MODEL_ALIAS, REQUEST_EXTRA, serve_bundled_llm
from tests.support.oracles import content_share

REPO = Path(__file__).resolve().parent.parent
WELL_GROUNDED = 0.8  # share of a fact's content words in the interactions it cites
STYLES = ("extractive", "abstractive")


def interactions(path: Path, sessions: int) -> list[dict[str, Any]]:
    """Conversation 0's first sessions, one interaction per turn, dated by its session."""
    conversation = json.loads(path.read_bytes())[0]["conversation"]
    first = conversation["speaker_a"]
    return [
        {
            "id": f"locomo-0:{t['dia_id']}",
            "scope": "locomo:0",
            "session": f"session_{n}",
            "timestamp": date,
            "messages": [
                {
                    "role": "user" if t["speaker"] == first else "assistant",
                    "name": t["speaker"],
                    "text": t["text"],
                }
            ],
        }
        for n, (turns, date) in enumerate(locomo_sessions(conversation)[:sessions], start=1)
        for t in turns
    ]


def _figures(db: str, pushed: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    said = {
        seq: f"{i['messages'][0]['name']}: {i['messages'][0]['text']}"
        for seq, i in enumerate(pushed, start=1)
    }
    with sqlite3.connect(db) as conn:
        runs = conn.execute(
            "SELECT outcome, llm_calls, ms, ungrounded FROM distill_runs"
        ).fetchall()
        facts = conn.execute("SELECT text, first_seq, last_seq FROM facts").fetchall()
        summaries = [t for (t,) in conn.execute("SELECT text FROM summaries")]
        (dead,) = conn.execute("SELECT count(*) FROM dead_letters").fetchone()
    committed = [r for r in runs if r[0] == "committed"]
    grounded = [
        content_share(text, [said[s] for s in range(first, last + 1)]) >= WELL_GROUNDED
        for text, first, last in facts
    ]
    return {
        "calls": len(runs),
        "batches": len(committed) + dead,
        "first_try_valid": sum(r[1] == 1 for r in committed) / max(len(runs), 1),
        "dead_letters": dead,
        "facts": len(facts),
        "facts_per_batch": len(facts) / max(len(committed), 1),
        "ungrounded": sum(r[3] for r in runs),
        "seconds_per_batch": sum(r[2] for r in runs) / 1000 / max(len(committed) + dead, 1),
        "grounded_share": sum(grounded) / max(len(grounded), 1),
        "summaries": len(summaries),
        "bare_number_summaries": sum(not any(c.isalpha() for c in s) for s in summaries),
        "wall_s": seconds,
    }


async def measure(path: Path, sessions: int, styles: list[str], batch_tokens: int) -> list[Any]:
    pushed = interactions(path, sessions)
    results = []
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve_bundled_llm)
        for style in styles:
            with tempfile.TemporaryDirectory(prefix="forged-smallmodel-") as tmp:
                started = time.perf_counter()
                distill = {"max_batch_tokens": batch_tokens}
                async with running(Path(tmp), url, distiller=_style(style), distill=distill) as d:
                    client = await d.client()
                    answer = await client.push(msgspec.json.encode(pushed))
                    await wait_drained(client, answer["last_seq"])
                    await client.aclose()
                seconds = time.perf_counter() - started
                results.append((style, _figures(str(Path(tmp) / "forged.db"), pushed, seconds)))
        nursery.cancel_scope.cancel()
    return results


def _style(style: str) -> dict[str, Any]:
    """The distiller section that runs the bundled model as `forged serve --bundled-llm` does."""
    return {"style": style, "model": MODEL_ALIAS, "request_extra": REQUEST_EXTRA}


async def recall_quality(
    repo: Path, sessions: int | None, work: Path, batch_tokens: int = 500
) -> tuple[quality.Results, dict[str, Any]] | None:
    """`make eval`: conversation 0 (its first `sessions`, or all) distilled by the bundled model in
    the bundled default style, its questions answered from them, scored beside the baselines;
    with the distillation figures. None without LoCoMo."""
    conv = quality.first_sessions_of(repo, sessions)
    if conv is None:
        return None
    results: quality.Results = {}
    started = time.perf_counter()
    costs: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve_bundled_llm)
        blocks = await quality.ask(
            [conv],
            url,
            work / quality.BUNDLED,
            costs,
            distiller=_style("extractive"),
            distill={"max_batch_tokens": batch_tokens},
        )
        nursery.cancel_scope.cancel()
    db = str(work / quality.BUNDLED / "forged.db")
    figures = _figures(db, conv.interactions, time.perf_counter() - started)
    figures["costs"] = costs
    quality.add_scores(results, quality.BUNDLED, [conv], blocks)
    return results, figures


def _grounded(figures: dict[str, Any]) -> str:
    return f"{figures['grounded_share']:.0%}" if figures["facts"] else "none stored"


def table(results: list[Any], sessions: int, turns: int) -> str:
    rows = [
        "| style | batches | first-try valid | dead letters | facts | facts/batch | dropped"
        " ungrounded | s/batch | stored facts grounded (≥ 80 %) | summaries (bare numbers) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for style, f in results:
        rows.append(
            f"| {style} | {f['batches']} | {f['first_try_valid']:.0%} | {f['dead_letters']}"
            f" | {f['facts']} | {f['facts_per_batch']:.1f} | {f['ungrounded']}"
            f" | {f['seconds_per_batch']:.1f} | {_grounded(f)}"
            f" | {f['summaries']} ({f['bare_number_summaries']}) |"
        )
    return f"LoCoMo conversation 0, sessions 1 to {sessions} ({turns} turns).\n\n" + "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.smallmodel", description=__doc__)
    parser.add_argument("--locomo", type=Path, help="locomo10.json (default: found beside us)")
    parser.add_argument("--sessions", type=int, default=2, help="how many sessions to push")
    parser.add_argument("--style", action="append", choices=STYLES, help="default: both")
    parser.add_argument("--max-batch-tokens", type=int, default=500)
    args = parser.parse_args(argv)
    path = args.locomo or locomo_path(REPO)
    if path is None or not path.is_file():
        print("LoCoMo not found: pass --locomo PATH", file=sys.stderr)
        return 2
    styles = args.style or list(STYLES)
    results = trio.run(measure, path, args.sessions, styles, args.max_batch_tokens)
    print(table(results, args.sessions, len(interactions(path, args.sessions))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
