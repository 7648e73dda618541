"""Salience: which LoCoMo turns a distiller keeps, beside the turns LoCoMo's questions cite.

A turn is kept when a stored fact names it as a source (its `first_seq`-`last_seq`). Recall is
the share of evidence turns (those a question of categories 1-4 cites) kept; precision the
share of kept turns that are evidence. A kept item is small talk by forged.distill.salience's
documented rule (`small_talk`: no sentence states anything, only greetings, thanks, sign-offs,
reactions or questions). Baselines keep the same share of the same turns: at random (seeded),
and the longest first.
"""

from __future__ import annotations

import random
import re
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.corpus import locomo_samples
from bench.quality import CATEGORIES, Conversation
from forged.distill.salience import small_talk

SEED = 0  # the random baseline's draw, the same every run
TUNED_ON = 5  # the salience weights were fitted on LoCoMo's first five conversations


@dataclass
class Kept:
    """What one distiller kept of the turns pushed, and what keeping them cost."""

    name: str
    turns: set[tuple[str, str]]  # (conversation, dia_id)
    items: list[str]  # the kept items' texts, for the small-talk rule
    facts: int | None = None
    batches: int | None = None
    seconds: float | None = None  # distiller time over all batches
    cpu: float | None = None  # CPU seconds of the daemon (and model server) while distilling


def evidence(repo: Path, convs: list[Conversation]) -> set[tuple[str, str]]:
    """The turns of `convs` a question of categories 1-4 cites as evidence."""
    pushed = {(c.sample_id, i["id"].split(":", 1)[1]) for c in convs for i in c.interactions}
    cited = {
        (s["sample_id"], dia)
        for s in locomo_samples(repo)
        for q in s["qa"]
        if q["category"] in CATEGORIES
        for dia in re.findall(r"D\d+:\d+", " ".join(map(str, q.get("evidence", []))))
    }
    return cited & pushed


def kept(name: str, db: Path, cost: dict[str, float] | None = None) -> Kept:
    """The turns the daemon whose database is `db` kept, its facts and its batches."""
    with closing(sqlite3.connect(db)) as conn:
        ids = dict(conn.execute("SELECT seq, client_id FROM interactions").fetchall())
        facts = conn.execute("SELECT text, first_seq, last_seq FROM facts").fetchall()
        batches, ms = conn.execute(
            "SELECT count(*), coalesce(sum(ms), 0) FROM distill_runs WHERE outcome = 'committed'"
        ).fetchone()
    turns: set[tuple[str, str]] = {
        (ids[seq].split(":", 1)[0], ids[seq].split(":", 1)[1])
        for _, first, last in facts
        for seq in range(first, last + 1)
        if seq in ids
    }
    texts = [text.split(": ", 1)[-1] for text, _, _ in facts]
    cpu = None if cost is None else cost.get("cpu")
    return Kept(name, turns, texts, len(facts), batches, ms / 1000, cpu)


def _turn_texts(convs: list[Conversation]) -> dict[tuple[str, str], str]:
    return {
        (c.sample_id, i["id"].split(":", 1)[1]): i["messages"][0]["text"]
        for c in convs
        for i in c.interactions
    }


def baselines(share: float, convs: list[Conversation], label: str) -> list[Kept]:
    """Random and longest-first, each keeping `share` of the turns of `convs`."""
    texts = _turn_texts(convs)
    k = round(share * len(texts))
    ordered = sorted(texts)
    drawn = set(random.Random(SEED).sample(ordered, k))
    longest = set(sorted(ordered, key=lambda t: -len(texts[t]))[:k])
    return [
        Kept(f"random at {label}'s share", drawn, [texts[t] for t in drawn]),
        Kept(f"longest-first at {label}'s share", longest, [texts[t] for t in longest]),
    ]


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def row(k: Kept, convs: list[Conversation], cited: set[tuple[str, str]]) -> str:
    turns = len(_turn_texts(convs))
    mine = {t for t in k.turns if t[0] in {c.sample_id for c in convs}}
    hits = len(mine & cited)
    chatty = sum(small_talk(text) for text in k.items)
    per_batch = None if k.batches is None else (k.facts or 0) / max(k.batches, 1)
    per_call = None if k.seconds is None or not k.batches else k.seconds / k.batches
    cpu = None if k.cpu is None else k.cpu * 100 / turns
    cells = [
        k.name,
        f"{len(mine) / turns:.1%}",
        f"{hits / max(len(cited), 1):.3f}",
        f"{hits / max(len(mine), 1):.3f}",
        f"{chatty / max(len(k.items), 1):.1%}",
        _cell(per_batch, ".1f"),
        _cell(per_call, ".3f"),
        _cell(cpu, ".2f"),
    ]
    return "| " + " | ".join(cells) + " |"


# A data table, one row a line: the formatter would reflow its rows.
HEAD = ("distiller", "turns kept", "evidence recall", "evidence precision", "small talk",
        "facts/batch", "s/batch", "CPU s/100 turns")  # fmt: skip


def table(measured: list[Kept], convs: list[Conversation], repo: Path) -> str:
    """Each distiller's row, followed by its two baselines at its kept share."""
    cited = evidence(repo, convs)
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    turns = len(_turn_texts(convs))
    for k in measured:
        lines.append(row(k, convs, cited))
        share = len(k.turns & set(_turn_texts(convs))) / turns
        lines += [row(b, convs, cited) for b in baselines(share, convs, k.name)]
    return "\n".join(lines)


def halves(measured: list[Kept], convs: list[Conversation], repo: Path) -> str:
    """Kept share, recall and precision on the conversations the weights were fitted on and on
    the others."""
    parts = [("1-5 (fitted on)", convs[:TUNED_ON]), ("6-10 (held out)", convs[TUNED_ON:])]
    head = ("distiller", "conversations", "turns kept", "evidence recall", "evidence precision")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in measured:
        for label, part in parts:
            if not part:
                continue
            cited = evidence(repo, part)
            ids = set(_turn_texts(part))
            mine = k.turns & ids
            hits = len(mine & cited)
            lines.append(
                f"| {k.name} | {label} | {len(mine) / len(ids):.1%}"
                f" | {hits / max(len(cited), 1):.3f} | {hits / max(len(mine), 1):.3f} |"
            )
    return "\n".join(lines)


def measured(names: list[str], work: Path, costs: dict[str, dict[str, Any]]) -> list[Kept]:
    """The kept turns of each distiller whose daemon ran in `work/<name>`."""
    return [
        kept(n, work / n / "forged.db", costs.get(n))
        for n in names
        if (work / n / "forged.db").exists()
    ]
