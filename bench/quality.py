"""Quality: how much of what LoCoMo's questions ask for a context block holds, against plain search.

Each LoCoMo conversation is pushed through the socket, one interaction per turn, dated by its
session, and distilled. Every question of categories 1-4 then asks for a context block of a fixed
budget; the score is the share of the answer's content words the block holds. Beside forged, in
the same run, at the same budget and with the same token estimate and line format: BM25 over the
raw turns, and the most recent turns.
"""

from __future__ import annotations

import re
import sqlite3
import statistics
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bench.corpus import locomo_samples, ndjson
from bench.report import Row
from bench.runner import children, cpu_seconds, fake_llm, running, wait_drained
from forged.models import FACT_KINDS, MemoryItem
from forged.recall.packing import pack
from forged.recall.query import fts_query, query_phrases
from tests.support.fakellm import gold_key

BUDGET = 400  # tokens per context block, for forged and every baseline
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}  # 5 is adversarial
DISTILLERS = ("gold", "echo", "linepicker", "offline")  # two of the fake LLM's; two with no model
BUNDLED = "bundled"  # the bundled model, on the first sessions of one conversation
BEHAVIOUR = {"gold": "gold", "echo": "ok"}  # the fake LLM's: LoCoMo's observations; its default
NO_MODEL = {  # the distillers without a model: the line picker, and the offline default
    "linepicker": {"class": "forged.distill.linepicker:LinePicker"},
    "offline": {"class": "forged.distill.offline:OfflineDistiller"},
}
NO_SERVER = "http://127.0.0.1:9"  # their distiller URL: they ask no server
METHODS = ("forged", "bm25", "recent")  # forged's block, BM25 over the raw turns, the latest turns
SESSION_TIME = "%I:%M %p on %d %B, %Y"  # how LoCoMo dates a session: "1:56 pm on 8 May, 2023"
GOLD_KIND = "event" if "event" in FACT_KINDS else "state"  # observations are mostly events
SEARCH_DEPTH = 100  # raw turns the BM25 baseline ranks per question, as forged's max_limit
# A data table, one row a line: the formatter would reflow its rows.
STOPWORDS = frozenset({  # words that say nothing about an answer: not counted
    "a", "an", "the", "and", "or", "but", "of", "to", "in", "on", "at", "for", "with", "by",
    "from", "as", "is", "was", "were", "be", "been", "are", "am", "do", "did", "does", "has",
    "have", "had", "it", "its", "this", "that", "these", "those", "he", "she", "they", "them",
    "his", "her", "their", "i", "you", "we", "my", "our", "your", "me", "us", "not", "no", "yes",
    "so", "if", "than", "then", "there", "what", "when", "where", "who", "which", "how",
})  # fmt: skip
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Question:
    category: int
    text: str
    answer: str


@dataclass
class Conversation:
    """One LoCoMo sample as forged sees it: interactions, the gold facts, the questions."""

    sample_id: str
    scope: str
    interactions: list[dict[str, Any]] = field(default_factory=list)
    gold: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    evidence: dict[str, set[str]] = field(default_factory=dict)  # gold fact -> its turns' days
    questions: list[Question] = field(default_factory=list)


def session_start(raw: str) -> datetime:
    """LoCoMo's session date (the dataset gives no zone: read as UTC)."""
    return datetime.strptime(raw, SESSION_TIME).replace(tzinfo=UTC)


def _session_time(raw: str) -> str:
    """LoCoMo's session date as an ISO timestamp."""
    return session_start(raw).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _turn_text(turn: dict[str, Any]) -> str:
    caption = turn.get("blip_caption")
    return f"{turn['text']} [shares {caption}]" if caption else str(turn["text"])


def _conversation(sample: dict[str, Any], first_sessions: int | None = None) -> Conversation:
    """A LoCoMo sample, or its first sessions and the questions whose evidence they hold."""
    conv = Conversation(sample["sample_id"], f"locomo:{sample['sample_id']}")
    talk = sample["conversation"]
    sessions = sorted(
        (k for k in talk if re.fullmatch(r"session_\d+", k) and talk[k]),
        key=lambda k: int(k.split("_")[1]),
    )[:first_sessions]
    texts: dict[str, str] = {}
    days: dict[str, str] = {}
    for key in sessions:
        timestamp = _session_time(talk[f"{key}_date_time"])
        for turn in talk[key]:
            texts[turn["dia_id"]] = _turn_text(turn)
            days[turn["dia_id"]] = timestamp[:10]
            conv.interactions.append(
                {
                    "id": f"{conv.sample_id}:{turn['dia_id']}",
                    "scope": conv.scope,
                    "session": key,
                    "timestamp": timestamp,
                    "messages": [
                        {"role": "user", "name": turn["speaker"], "text": texts[turn["dia_id"]]}
                    ],
                }
            )
    for observations in sample["observation"].values():
        for facts in observations.values():
            for text, evidence in facts:
                for dia_id in re.findall(r"D\d+:\d+", str(evidence)):
                    if dia_id in texts:
                        found = conv.gold.setdefault(gold_key(texts[dia_id]), [])
                        found.append({"kind": GOLD_KIND, "text": text})
                        conv.evidence.setdefault(text, set()).add(days[dia_id])
                        break  # an observation citing several turns is distilled once
    conv.questions = [
        Question(q["category"], q["question"], str(q["answer"]))
        for q in sample["qa"]
        if q["category"] in CATEGORIES
        and "answer" in q
        and (first_sessions is None or _said(q.get("evidence", []), texts))
    ]
    return conv


def _said(evidence: list[str], texts: dict[str, str]) -> bool:
    """Whether every turn a question's answer rests on was pushed (and it names one at least)."""
    cited = re.findall(r"D\d+:\d+", " ".join(map(str, evidence)))
    return bool(cited) and all(c in texts for c in cited)


def conversations_of(repo: Path, limit: int | None) -> list[Conversation]:
    """The first `limit` LoCoMo conversations (all when None); none when the file is absent."""
    samples = locomo_samples(repo)
    return [_conversation(s) for s in samples[:limit]]


def first_sessions_of(repo: Path, sessions: int | None) -> Conversation | None:
    """Conversation 0 (its first `sessions`, or all) and the questions its turns answer; None
    without LoCoMo."""
    samples = locomo_samples(repo)
    return _conversation(samples[0], sessions) if samples else None


def content_words(text: str) -> set[str]:
    """Words that carry meaning, folded; numbers without leading zeros ("07" is "7")."""
    words = (w.lstrip("0") or "0" if w.isdigit() else w for w in _WORD.findall(text.casefold()))
    return {w for w in words if w not in STOPWORDS}


def raw_item(
    n: int, scope: str, at: str, speaker: str, text: str, seq: int | None = None
) -> MemoryItem:
    """Something said as a recall item, so baselines are packed and dated exactly as forged's
    turns (`seq`: the interaction it belongs to, `n` when None)."""
    seq = n if seq is None else seq
    return MemoryItem(
        id=n,
        type="interaction",
        kind="interaction",
        scope=scope,
        session=None,
        text=f"{speaker}: {text}",
        score=0.0,
        created_at=at,
        last_seen_at=at,
        first_seq=seq,
        last_seq=seq,
        first_at=at,
        last_at=at,
        speaker=speaker,
    )


def _turn_item(n: int, scope: str, interaction: dict[str, Any]) -> MemoryItem:
    """A raw LoCoMo turn as a recall item."""
    (message,) = interaction["messages"]
    return raw_item(n, scope, interaction["timestamp"], message["name"], message["text"])


class RawTurns:
    """The baselines: BM25 over the conversation's raw turns, and its most recent turns."""

    def __init__(self, conv: Conversation) -> None:
        self.items = [_turn_item(n, conv.scope, i) for n, i in enumerate(conv.interactions)]
        self.db = sqlite3.connect(":memory:")
        self.db.execute(
            "CREATE VIRTUAL TABLE turns USING fts5(text,"
            " tokenize='porter unicode61 remove_diacritics 2')"
        )
        self.db.executemany(
            "INSERT INTO turns (rowid, text) VALUES (?, ?)", ((i.id, i.text) for i in self.items)
        )

    def bm25(self, question: str) -> str:
        """The best-matching turns, best first, packed into the budget."""
        phrases = query_phrases(question)
        if not phrases:
            return ""
        rows = self.db.execute(
            "SELECT rowid FROM turns WHERE turns MATCH ? ORDER BY bm25(turns) LIMIT ?",
            (fts_query(phrases), SEARCH_DEPTH),
        ).fetchall()
        return pack([self.items[r] for (r,) in rows], BUDGET).text

    def recent(self) -> str:
        """The latest turns that fit, in the order they were said."""
        answer = pack(reversed(self.items), BUDGET)
        return pack(sorted(answer.items, key=lambda i: i.id), BUDGET).text


@dataclass(frozen=True)
class Score:
    """One question answered by one method: the share of answer words held, and all of them?"""

    conversation: str
    category: int
    recall: float
    hit: bool


def score(conv: Conversation, question: Question, block: str) -> Score | None:
    wanted = content_words(question.answer)
    if not wanted:
        return None
    found = len(wanted & content_words(block)) / len(wanted)
    return Score(conv.sample_id, question.category, found, found == 1.0)


async def ask(
    convs: list[Conversation],
    llm_url: str,
    work: Path,
    costs: dict[str, float] | None = None,
    **sections: dict[str, Any],
) -> list[str]:
    """Push every conversation, let the daemon distil it, ask every question for a block;
    `costs` gets the CPU seconds the daemon and this process's children (a model server)
    spent from the push until all was distilled."""
    blocks: list[str] = []
    async with running(work, llm_url, **sections) as daemon:
        client = await daemon.client()
        pushed = [i for c in convs for i in c.interactions]
        pids = {daemon.pid or 0} | children()
        before = cpu_seconds(pids)
        answer = await client.push(ndjson(pushed), "application/x-ndjson")
        await wait_drained(client, answer["last_seq"])
        if costs is not None:
            costs["cpu"] = cpu_seconds(pids) - before
        for conv in convs:
            for q in conv.questions:
                query = {"q": q.text, "scope": conv.scope, "budget_tokens": BUDGET}
                blocks.append((await client.get("/v1/context?" + urlencode(query)))["text"])
        await client.aclose()
    return blocks


async def _distilled_blocks(
    convs: list[Conversation], distiller: str, work: Path, costs: dict[str, float]
) -> list[str]:
    """The blocks when the fake LLM distils in its `distiller` behaviour, or a distiller
    without a model."""
    if distiller not in BEHAVIOUR:
        return await ask(convs, NO_SERVER, work / distiller, costs, distiller=NO_MODEL[distiller])
    async with fake_llm(default=BEHAVIOUR[distiller]) as llm:
        llm.gold = {k: v for c in convs for k, v in c.gold.items()}
        return await ask(convs, llm.base_url, work / distiller, costs)


def dated_right(convs: list[Conversation], work: Path) -> tuple[int, int]:
    """Of the gold facts the daemon in `work` stored, how many, and how many of those are
    dated on one day, the day of a turn LoCoMo gives as the fact's evidence."""
    evidence = {text: days for c in convs for text, days in c.evidence.items()}
    with closing(sqlite3.connect(work / "forged.db")) as db:
        spans = db.execute("SELECT text, first_at, last_at FROM facts").fetchall()
    known = [
        (evidence[text], first[:10], last[:10]) for text, first, last in spans if text in evidence
    ]
    return len(known), sum(first == last and first in days for days, first, last in known)


Results = dict[tuple[str, str], list[Score]]  # (distiller, method) -> one score per question


def add_scores(
    results: Results, distiller: str, convs: list[Conversation], blocks: list[str]
) -> None:
    """Score forged's blocks (one per question, in order) beside both baselines."""
    forged = iter(blocks)
    for conv in convs:
        raw = RawTurns(conv)
        recent = raw.recent()
        for q in conv.questions:
            for method, block in (
                ("forged", next(forged)),
                ("bm25", raw.bm25(q.text)),
                ("recent", recent),
            ):
                if (s := score(conv, q, block)) is not None:
                    results.setdefault((distiller, method), []).append(s)


async def measure(
    convs: list[Conversation],
    work: Path,
    names: tuple[str, ...] = DISTILLERS,
    costs: dict[str, dict[str, float]] | None = None,
) -> Results:
    """Each model-free distiller's block (all of them unless `names`) and both baselines for
    every question of every conversation; `costs` gets each one's CPU seconds."""
    results: Results = {}
    for distiller in names:
        spent: dict[str, float] = {}
        blocks = await _distilled_blocks(convs, distiller, work, spent)
        add_scores(results, distiller, convs, blocks)
        if costs is not None:
            costs[distiller] = spent
    return results


def distillers(results: Results) -> list[str]:
    """The distillers measured, in the table's order."""
    return [d for d in (*DISTILLERS, BUNDLED) if (d, "forged") in results]


def mean_recall(scores: list[Score]) -> float:
    return statistics.fmean(s.recall for s in scores) if scores else 0.0


def hit_rate(scores: list[Score]) -> float:
    return statistics.fmean(s.hit for s in scores) if scores else 0.0


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def table(results: Results) -> str:
    """Per distiller and category: answer-word recall and full-answer hits of each method."""
    head = (
        "distiller",
        "category",
        "questions",
        "forged recall",
        "BM25 recall",
        "recent recall",
        "forged / BM25",
        "forged hits",
        "BM25 hits",
        "recent hits",
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for distiller in distillers(results):
        groups: list[tuple[str, int | None]] = [(CATEGORIES[c], c) for c in CATEGORIES]
        for name, category in [*groups, ("**overall**", None)]:
            per = {
                m: [s for s in results[(distiller, m)] if category in (None, s.category)]
                for m in METHODS
            }
            recalls = [mean_recall(per[m]) for m in METHODS]
            hits = [f"{hit_rate(per[m]):.1%}" for m in METHODS]
            cells = [
                distiller,
                name,
                str(len(per["forged"])),
                *(f"{r:.3f}" for r in recalls),
                _ratio(recalls[0], recalls[1]),
                *hits,
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio(results: Results, distiller: str, category: int | None = None) -> float:
    """Forged's mean recall over BM25's, in one category or overall, every conversation."""
    means = [
        mean_recall([s for s in results[(distiller, m)] if category in (None, s.category)])
        for m in ("forged", "bm25")
    ]
    return means[0] / means[1] if means[1] else float("inf")


def _ratio_of(results: Results, distiller: str, conv: str, category: int | None) -> float:
    """Forged's mean recall over BM25's on one conversation, in one category or overall."""
    means = [
        mean_recall(
            [
                s
                for s in results[(distiller, m)]
                if s.conversation == conv and category in (None, s.category)
            ]
        )
        for m in ("forged", "bm25")
    ]
    return means[0] / means[1] if means[1] else float("inf")


def per_conversation(results: Results) -> str:
    """Forged over BM25 on each conversation: overall and in its weakest category."""
    head = ("distiller", "conversation", "forged / BM25 overall", "weakest category", "its ratio")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for distiller in distillers(results):
        for conv in dict.fromkeys(s.conversation for s in results[(distiller, "forged")]):
            ratios = {c: _ratio_of(results, distiller, conv, c) for c in CATEGORIES}
            worst = min(ratios, key=lambda c: ratios[c])
            cells = [
                distiller,
                conv,
                f"{_ratio_of(results, distiller, conv, None):.2f}",
                CATEGORIES[worst],
                f"{ratios[worst]:.2f}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def rows(repo: Path, conversations: int, work: Path) -> list[Row]:
    """The `quality` step of `make bench`: forged's answer-word recall beside BM25's."""
    convs = conversations_of(repo, conversations)
    baseline = "BM25 over the raw turns"
    measure_name = f"quality: answer words in a {BUDGET}-token block"
    if not convs:
        return [
            Row(f"{measure_name}, {d}", None, "share", baseline, None, "LoCoMo not found")
            for d in DISTILLERS
        ]
    results = await measure(convs, work)
    return [
        Row(
            f"{measure_name}, {d} distiller ({len(convs)} conversations)",
            mean_recall(results[(d, "forged")]),
            "share",
            baseline,
            mean_recall(results[(d, "bm25")]),
        )
        for d in DISTILLERS
    ]
