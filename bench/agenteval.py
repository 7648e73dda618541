"""Quality on agent traffic (bench.agenttraffic): what the offline default keeps and finds.

Every chat is pushed through the socket, one interaction per exchange (the user's message and
the assistant's answer), and distilled by the offline distiller. Each question then asks for a
context block and for search's ten best results. Measured beside three baselines built in the
same run: BM25 over whole turns (each exchange as pushed one document, as LoCoMo's baseline
is over the interactions pushed; its block filled as a naive RAG fills one, the turn that does
not fit cut to the room left: `cut_to_fit`), over messages (each message one document: a
stronger one, a user's message often fits the block whole) and over single lines (each line
of a message one document, with its speaker), packed into the same budget as forged packs.
"""

from __future__ import annotations

import re
import sqlite3
import statistics
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import msgspec

from bench.agenttraffic import SYNTHETIC, AgentChat, AgentQuestion
from bench.corpus import ndjson
from bench.quality import (
    BUDGET,
    CATEGORIES,
    NO_MODEL,
    NO_SERVER,
    SEARCH_DEPTH,
    content_words,
    raw_item,
)
from bench.runner import running, wait_drained, wait_embedded
from forged.models import MemoryItem
from forged.recall.packing import cost, pack
from forged.recall.query import fts_query, query_phrases

__all__ = [
    "METHODS",
    "TOP",
    "Answered",
    "Baselines",
    "Kept",
    "cut_to_fit",
    "kept_table",
    "measure",
    "table",
]

TOP = 10  # search results whose sources count as found: evidence recall@10
METHODS = ("forged", "turns", "messages", "lines")  # forged; BM25 over exchanges, messages, lines
UNITS = METHODS[1:]  # the baselines' documents
DISTILLER = "offline"  # the default without a model: what a new user gets
ORDER = (*CATEGORIES.values(), *SYNTHETIC)  # the tables' rows
_MARKUP = re.compile(r"^\s*(?:#|\||```)")  # a markdown heading, table row or code fence


@dataclass(frozen=True)
class Answered:
    """One question answered by each method: the share of answer words in its block, the share
    of its evidence exchanges among the sources of the ten best results, and for a changed
    value whether the block holds the new value ahead of the stale one."""

    chat: str
    category: str
    recall: dict[str, float]
    evidence: dict[str, float]
    ahead: dict[str, bool] | None


class Baselines:
    """BM25 over a chat's whole turns (exchanges), its messages and its single lines."""

    def __init__(self, chat: AgentChat) -> None:
        self.items: dict[str, list[MemoryItem]] = {unit: [] for unit in UNITS}
        turns, messages, lines = (self.items[unit] for unit in UNITS)
        for x, interaction in enumerate(chat.interactions):
            at = interaction["timestamp"]
            said = [(m.get("name") or m["role"], m["text"]) for m in interaction["messages"]]
            whole = "\n".join(f"{who}: {text}" for who, text in said[1:])
            turns.append(raw_item(len(turns), chat.scope, at, said[0][0], said[0][1], x))
            turns[-1] = msgspec.structs.replace(turns[-1], text=f"{turns[-1].text}\n{whole}")
            for who, text in said:
                messages.append(raw_item(len(messages), chat.scope, at, who, text, x))
                for line in filter(str.strip, text.splitlines()):
                    lines.append(raw_item(len(lines), chat.scope, at, who, line, x))
        self.db = sqlite3.connect(":memory:")
        for unit, items in self.items.items():
            self.db.execute(
                f"CREATE VIRTUAL TABLE {unit} USING fts5(text,"
                " tokenize='porter unicode61 remove_diacritics 2')"
            )
            self.db.executemany(
                f"INSERT INTO {unit} (rowid, text) VALUES (?, ?)", ((i.id, i.text) for i in items)
            )

    def ranked(self, unit: str, question: str) -> list[MemoryItem]:
        """The best-matching documents of a unit, best first."""
        phrases = query_phrases(question)
        if not phrases:
            return []
        rows = self.db.execute(
            f"SELECT rowid FROM {unit} WHERE {unit} MATCH ? ORDER BY bm25({unit}) LIMIT ?",
            (fts_query(phrases), SEARCH_DEPTH),
        ).fetchall()
        return [self.items[unit][r] for (r,) in rows]


def _cut(item: MemoryItem, taken: list[MemoryItem], budget: int) -> MemoryItem | None:
    """The item's longest head, in whole words, that fits in the room `taken` leaves in the
    budget (found by halving); None when not even its first word does."""
    words = item.text.split(" ")
    low, high = 0, len(words)  # low words fit; high + 1 do not
    while low < high:
        mid = (low + high + 1) // 2
        head = msgspec.structs.replace(item, text=" ".join(words[:mid]))
        low, high = (mid, high) if cost([*taken, head]) <= budget else (low, mid - 1)
    return msgspec.structs.replace(item, text=" ".join(words[:low])) if low else None


def cut_to_fit(ranked: list[MemoryItem], budget: int) -> str:
    """A naive RAG's block: the ranked documents in order, each whole while it fits and the
    first that does not cut to the room left, as text is cut at a token budget; then full."""
    taken: list[MemoryItem] = []
    for item in ranked:
        if cost([*taken, item]) > budget:
            head = _cut(item, taken, budget)
            taken += [head] if head else []
            break
        taken.append(item)
    return pack(taken, budget).text


def _ahead(question: AgentQuestion, block: str) -> bool | None:
    """For a changed value: whether the block holds the new value before the stale one, or
    without it; None for other questions."""
    if not question.stale:
        return None
    text = block.casefold()
    new, old = text.find(question.answer.casefold()), text.find(question.stale.casefold())
    return new >= 0 and (old < 0 or new < old)


def _recall(question: AgentQuestion, block: str) -> float:
    wanted = content_words(question.answer)
    return len(wanted & content_words(block)) / len(wanted) if wanted else 0.0


def _found(question: AgentQuestion, exchanges: set[int]) -> float:
    return len(question.evidence & exchanges) / len(question.evidence)


def _spanned(result: dict[str, Any], first: int) -> set[int]:
    """The exchange a search result comes from (`first`: the chat's first seq); none for one
    drawn from several (a summary), which would otherwise find a whole batch."""
    a, b = result["first_seq"] - first, result["last_seq"] - first
    return {a} if a == b else set()


async def _forged(
    chats: list[AgentChat], work: Path, embed: dict[str, Any] | None
) -> list[tuple[str, set[int]]]:
    """Push every chat, distil it offline (and embed it, with an `[embed]` section), ask each
    question: forged's block and the exchanges its ten best search results come from."""
    out: list[tuple[str, set[int]]] = []
    sections = {"distiller": NO_MODEL[DISTILLER]} | ({"embed": embed} if embed else {})
    async with running(work, NO_SERVER, **sections) as daemon:
        client = await daemon.client()
        pushed = [i for c in chats for i in c.interactions]
        answer = await client.push(ndjson(pushed), "application/x-ndjson")
        await wait_drained(client, answer["last_seq"])
        if embed:
            await wait_embedded(client, answer["last_seq"], work / "forged.db")
        first = answer["last_seq"] - len(pushed) + 1
        for chat in chats:
            for q in chat.questions:
                asked = {"q": q.text, "scope": chat.scope}
                block = await client.get(
                    "/v1/context?" + urlencode(asked | {"budget_tokens": BUDGET})
                )
                found = await client.get("/v1/search?" + urlencode(asked | {"limit": TOP}))
                spans = [_spanned(r, first) for r in found["results"]]
                out.append((block["text"], set().union(*spans)))
            first += len(chat.interactions)
        await client.aclose()
    return out


async def measure(
    chats: list[AgentChat], work: Path, embed: dict[str, Any] | None = None
) -> list[Answered]:
    """Every question of every chat, answered by forged (recalling by meaning too, with an
    `[embed]` section) and the baselines."""
    forged = iter(await _forged(chats, work, embed))
    out = []
    for chat in chats:
        base = Baselines(chat)
        for q in chat.questions:
            blocks, found = dict.fromkeys(METHODS, ""), {m: set[int]() for m in METHODS}
            blocks["forged"], found["forged"] = next(forged)
            for unit in UNITS:
                ranked = base.ranked(unit, q.text)
                cut = unit == "turns"  # a whole turn never fits: cut as a naive RAG cuts
                blocks[unit] = cut_to_fit(ranked, BUDGET) if cut else pack(ranked, BUDGET).text
                found[unit] = {i.first_seq for i in ranked[:TOP]}
            out.append(
                Answered(
                    chat.sample_id,
                    q.category,
                    {m: _recall(q, blocks[m]) for m in METHODS},
                    {m: _found(q, found[m]) for m in METHODS},
                    None if not q.stale else {m: bool(_ahead(q, blocks[m])) for m in METHODS},
                )
            )
    return out


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def table(answered: list[Answered]) -> str:
    """Per category and overall: answer-word recall and evidence recall@10 of each method, and
    forged's ratios over each baseline."""
    names = {"turns": "turn", "messages": "message", "lines": "line"}
    head = (
        "category",
        "questions",
        "forged words",
        *(f"{names[u]} BM25" for u in UNITS),
        *(f"/ {names[u]}s" for u in UNITS),
        "forged evidence@10",
        *(f"{names[u]} BM25" for u in UNITS),
        *(f"/ {names[u]}s" for u in UNITS),
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in [*ORDER, "**overall**"]:
        rows = [a for a in answered if name in (a.category, "**overall**")]
        if not rows:
            continue
        cells = [name, str(len(rows))]
        for measure in ("recall", "evidence"):
            means = [_mean([getattr(a, measure)[m] for a in rows]) for m in METHODS]
            cells += [f"{v:.3f}" for v in means]
            cells += [_ratio(means[0], v) for v in means[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ahead(answered: list[Answered]) -> dict[str, float]:
    """Each method's share of changed values whose block holds the new one ahead."""
    rows = [a.ahead for a in answered if a.ahead is not None]
    return {m: _mean([float(r[m]) for r in rows]) for m in METHODS}


@dataclass
class Kept:
    """What the distiller stored of the chats: facts by speaker and by what an assistant line
    is, and summaries that copy a line whole."""

    facts: int = 0
    user: int = 0
    assistant: int = 0
    headings: int = 0
    code: int = 0
    table_rows: int = 0
    bullets: int = 0
    markup: int = 0  # facts that are one of those three, or any markdown heading, row or fence
    summaries: int = 0
    copying: int = 0  # summaries holding a whole user message or assistant line


def kept(chats: list[AgentChat], database: Path) -> Kept:
    """Count what the daemon whose store is `database` kept of the chats."""
    with closing(sqlite3.connect(database)) as db:
        facts = db.execute("SELECT scope, text FROM facts").fetchall()
        summaries = db.execute("SELECT scope, text FROM summaries").fetchall()
    by_scope = {c.scope: c for c in chats}
    said = {
        c.scope: {
            line.strip()
            for i in c.interactions
            for m in i["messages"]
            for line in m["text"].splitlines()
            if len(line.strip()) >= 40
        }
        for c in chats
    }
    out = Kept(facts=len(facts), summaries=len(summaries))
    for scope, text in facts:
        who, _, line = text.partition(": ")
        out.user += who == by_scope[scope].user
        out.assistant += who == "assistant"
        kind = by_scope[scope].line_kinds.get(line.strip(), "") if who == "assistant" else ""
        out.headings += kind == "heading"
        out.code += kind == "code"
        out.table_rows += kind == "table"
        out.bullets += kind == "bullet"
        out.markup += kind in ("heading", "code", "table") or bool(_MARKUP.match(line))
    for scope, text in summaries:
        parts = [s.partition(": ")[2].strip() for s in text.splitlines()]
        out.copying += any(p in said[scope] for p in parts)
    return out


def kept_table(k: Kept, lead: dict[str, float]) -> str:
    """What was kept, and how often the new value was ahead, as one table."""
    head = (
        "facts", "user lines", "assistant lines", "user share", "headings", "code", "table rows",
        "bullets", "any of those or markup", "summaries", "summaries copying a line",
        "new value ahead (forged / turns / messages / lines)",
    )  # fmt: skip
    cells = [
        f"{k.facts:,}",
        f"{k.user:,}",
        f"{k.assistant:,}",
        f"{k.user / max(k.facts, 1):.0%}",
        *(str(n) for n in (k.headings, k.code, k.table_rows, k.bullets, k.markup)),
        f"{k.summaries:,}",
        f"{k.copying:,}",
        " / ".join(f"{lead[m]:.0%}" for m in METHODS),
    ]
    return "\n".join(
        ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), "| " + " | ".join(cells) + " |"]
    )


SECTION = "## Agent traffic"
GOALS = {  # the development set's goals (forged's ratios over the baselines, shares)
    "answer words / turn BM25": 1.3,
    "answer words / line BM25": 1.1,
    "evidence@10 / turn BM25": 1.1,
    "user share of kept facts": 0.6,
    "new value ahead": 0.7,
}
NOTES = """\
`bench.agenttraffic` and `bench.agenteval`: LoCoMo's {chats} conversations retold as one person
(its first speaker) chatting with an assistant, generated at run time, seeded: a few turns in a
row become one user message ({words:,} words a message on average; the other speaker's turns as
reported speech), and each gets a long generic markdown answer ({lines:.0f} lines on average:
headings, steps, bullets, tables, code) that echoes a few of the user's words. Into them go, per
chat, {updates} values the user states and restates changed in a later session (a time, an
amount, a place, days), preferences, decisions the user takes on the assistant's recommendation
("Sounds good, let's go with …") and results the assistant reports. {exchanges:,} exchanges,
each one interaction of two messages, distilled by the `{distiller}` distiller (no model);
{questions:,} questions: LoCoMo's of categories 1-4, their evidence the exchanges that hold the
cited turns, and one per planted item.

- **answer words**: as for LoCoMo above, in a {budget}-token block.
- **evidence@10**: the share of a question's evidence exchanges that one of search's {top} best
  results comes from (a result drawn from several exchanges, a summary, counts none).
- **turn BM25**: BM25 (FTS5, forged's tokenizer, every word of the question) over whole turns,
  each exchange as pushed a document (as LoCoMo's baseline is over the interactions pushed),
  its block filled as a naive RAG fills one: the turns best first, each whole while it fits,
  the first that does not cut to the room left (in whole words, by the same token estimate),
  as text is cut at a token budget. With its long answer no exchange fits whole, so the block
  is the best turn's head: the user's message and the start of the assistant's answer.
  **message BM25**: the same over the messages, each a document, packed as forged packs (a
  user's message often fits whole: the strongest baseline here); **line BM25**: over the
  messages' single lines, each with its speaker.
- **kept**: the facts stored, by speaker; of the assistant's, those that are one of its
  headings, code lines, table rows or bullets; summaries copying a user message or a line.
- **new value ahead**: of the changed values, the share whose block holds the new value before
  the stale one, or without it."""


def _goal_lines(answered: list[Answered], k: Kept) -> str:
    """Each goal beside what was measured: against whole turns as the goal says, and against
    messages too, the stronger baseline."""
    recall = {m: _mean([a.recall[m] for a in answered]) for m in METHODS}
    found = {m: _mean([a.evidence[m] for a in answered]) for m in METHODS}
    measured = {
        "answer words / turn BM25": recall["forged"] / max(recall["turns"], 1e-9),
        "answer words / line BM25": recall["forged"] / max(recall["lines"], 1e-9),
        "evidence@10 / turn BM25": found["forged"] / max(found["turns"], 1e-9),
        "user share of kept facts": k.user / max(k.facts, 1),
        "new value ahead": ahead(answered)["forged"],
    }
    against = {
        "answer words / turn BM25": recall["forged"] / max(recall["messages"], 1e-9),
        "evidence@10 / turn BM25": found["forged"] / max(found["messages"], 1e-9),
    }
    lines = []
    for name, goal in GOALS.items():
        verdict = "met" if measured[name] >= goal else "NOT met"
        shown = f"{measured[name]:.2f}"
        if measured[name] > 1e6:  # an empty baseline: no ratio says anything
            shown, verdict = "n/a (the baseline's blocks hold nothing)", "not measurable"
        line = f"- {name}: {shown} (goal {goal:.2f}): {verdict}"
        if name in against:
            met = "met" if against[name] >= goal else "NOT met"
            line += f"; over message BM25: {against[name]:.2f}, {met}"
        lines.append(line)
    verdict = "met" if not k.markup else "NOT met"
    lines.append(f"- headings, code and table rows kept: {k.markup} (goal 0): {verdict}")
    return "\n".join(lines)


def section(chats: list[AgentChat], answered: list[Answered], k: Kept) -> str:
    """The report's agent-traffic section: how it is made, the tables, the goals."""
    messages = [i["messages"] for c in chats for i in c.interactions]
    notes = NOTES.format(
        chats=len(chats),
        words=round(_mean([len(m[0]["text"].split()) for m in messages])),
        lines=_mean([m[1]["text"].count("\n") + 1 for m in messages]),
        updates=sum(q.stale != "" for q in chats[0].questions),
        exchanges=len(messages),
        distiller=DISTILLER,
        questions=len(answered),
        budget=BUDGET,
        top=TOP,
    )
    return (
        f"{SECTION}\n\n{notes}\n\n{table(answered)}\n\n{kept_table(k, ahead(answered))}\n\n"
        f"{_goal_lines(answered, k)}\n"
    )
