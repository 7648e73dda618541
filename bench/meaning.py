"""Recall by meaning measured: the same store and questions with vectors and without.

LoCoMo: every conversation pushed through the socket and distilled offline (the default), its
turns, facts and summaries embedded by the embed observer; then each question asked twice of
the same database, once by a daemon with `[embed] enabled = true` and once without: evidence
recall of search's ten best turns (the share of the turns LoCoMo cites as a question's
evidence that they hold) and the answer words a 400-token context block holds.

The multilingual set (`bench.multilingual_set`): memories in Chinese, Japanese, Korean, German,
French and Spanish among English distractors, each asked for in its own language in other words
and in English; the share found in search's five best turns, by words and by words and meaning.

Agent traffic (`bench.agenttraffic`): its first AGENT_CHATS chats, measured as bench.agenteval
measures them, by a daemon recalling by words and by one embedding them too.

`python -m bench.meaning` prints the three tables (`--conversations N` for fewer of LoCoMo's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import trio

from bench import agenteval, agenttraffic
from bench.corpus import locomo_samples, ndjson
from bench.multilingual_set import DISTRACTORS, MEMORIES
from bench.quality import BUDGET, CATEGORIES, NO_MODEL, NO_SERVER, Conversation, _conversation
from bench.quality import content_words as answer_words
from bench.runner import Client, running, wait_drained, wait_embedded

__all__ = ["AGENT_CHATS", "agent", "locomo", "main", "multilingual"]

TOP = 10  # search results whose turns count for evidence recall
TOP_MULTILINGUAL = 5  # search results in which a multilingual memory must be
EMBED = {"enabled": True, "threads": 2, "batch": 32, "query_timeout_ms": 30_000}  # never late
AGENT_CHATS = 3  # agent-traffic chats embedded (each about 120 exchanges: a minute or two)


def _evidence(sample: dict[str, Any]) -> list[list[str]]:
    """Each question's evidence turns, in the order `_conversation` keeps the questions."""
    return [
        [f"{sample['sample_id']}:{d}" for d in q.get("evidence", [])]
        for q in sample["qa"]
        if q["category"] in CATEGORIES and "answer" in q
    ]


async def _ask(
    client: Client, convs: list[Conversation], evidence: list[list[list[str]]], ids: dict[str, int]
) -> tuple[list[float], list[float], list[float]]:
    """Evidence recall of search's TOP turns, answer words of the block, per question; and
    each search's seconds."""
    found, words, seconds = [], [], []
    for conv, cited in zip(convs, evidence, strict=True):
        for q, turns in zip(conv.questions, cited, strict=True):
            asked = {"q": q.text, "scope": conv.scope}
            started = time.perf_counter()
            result = await client.get(
                "/v1/search?" + urlencode(asked | {"limit": TOP, "types": "interaction"})
            )
            seconds.append(time.perf_counter() - started)
            block = await client.get("/v1/context?" + urlencode(asked | {"budget_tokens": BUDGET}))
            wanted = {ids[t] for t in turns if t in ids}
            if wanted:
                got = {r["id"] for r in result["results"]}
                found.append(len(wanted & got) / len(wanted))
            if answer := answer_words(q.answer):
                words.append(len(answer & answer_words(block["text"])) / len(answer))
    return found, words, seconds


async def locomo(repo: Path, conversations: int | None, work: Path) -> dict[str, Any]:
    """LoCoMo's figures by words alone and with meaning, from one store."""
    samples = locomo_samples(repo)[:conversations]
    convs = [_conversation(s) for s in samples]
    evidence = [_evidence(s) for s in samples]
    out: dict[str, Any] = {"conversations": len(convs), "questions": 0}
    distiller = NO_MODEL["offline"]
    started = time.perf_counter()
    async with running(work, NO_SERVER, distiller=distiller, embed=EMBED) as daemon:
        client = await daemon.client()
        pushed = [i for c in convs for i in c.interactions]
        answer = await client.push(ndjson(pushed), "application/x-ndjson")
        first = answer["last_seq"] - len(pushed) + 1
        ids = {i["id"]: first + n for n, i in enumerate(pushed)}
        await wait_drained(client, answer["last_seq"])
        await wait_embedded(client, answer["last_seq"], work / "forged.db")
        out["embed_s"] = time.perf_counter() - started
        out["turns"] = len(pushed)
        out["meaning"] = await _ask(client, convs, evidence, ids)
        out["rss_mib"] = daemon.peak_rss_mib()
        await client.aclose()
    async with running(work, NO_SERVER, distiller=distiller) as daemon:  # the same database
        client = await daemon.client()
        out["words"] = await _ask(client, convs, evidence, ids)
        out["rss_words_mib"] = daemon.peak_rss_mib()
        await client.aclose()
    out["questions"] = len(out["words"][1])
    return out


async def agent(repo: Path, chats: int, work: Path) -> dict[str, Any]:
    """Agent traffic's first `chats` chats (bench.agenttraffic), measured as bench.agenteval
    does, by a daemon recalling by words and by one embedding them too; none without LoCoMo."""
    made = agenttraffic.chats(repo, chats)
    if not made:
        return {}
    words = await agenteval.measure(made, work / "words")
    meant = await agenteval.measure(made, work / "meaning", EMBED)
    out: dict[str, Any] = {"chats": len(made), "questions": len(words)}
    for measure in ("evidence", "recall"):
        out[measure] = {
            "turns": statistics.fmean(getattr(a, measure)["turns"] for a in words),
            "words": statistics.fmean(getattr(a, measure)["forged"] for a in words),
            "meaning": statistics.fmean(getattr(a, measure)["forged"] for a in meant),
        }
    return out


def _agent_rows(agent: dict[str, Any]) -> list[str]:
    """The agent-traffic table: forged by words and with meaning, beside whole-turn BM25."""
    if not agent:
        return []
    lines = [
        "",
        f"| agent traffic, first {agent['chats']} chats ({agent['questions']} questions)"
        " | whole-turn BM25 | by words | by words and meaning |",
        "|---|---|---|---|",
    ]
    names = {"evidence": f"evidence@{TOP} of search", "recall": f"answer words, {BUDGET} tokens"}
    for measure, name in names.items():
        f = agent[measure]
        lines.append(
            f"| {name} | {f['turns']:.3f} | {f['words']:.3f} ({f['words'] / f['turns']:.2f} x)"
            f" | {f['meaning']:.3f} ({f['meaning'] / f['turns']:.2f} x) |"
        )
    return lines


async def multilingual(work: Path) -> dict[str, dict[str, float]]:
    """R@5 of the multilingual set, in each language and from English, by words and with
    meaning."""
    texts = [m[1] for m in MEMORIES] + list(DISTRACTORS)
    pushed = [
        {"id": f"m{n}", "scope": "multilingual", "messages": [{"role": "user", "text": t}]}
        for n, t in enumerate(texts)
    ]
    out: dict[str, dict[str, float]] = {}
    for mode, sections in (("meaning", {"embed": EMBED}), ("words", {})):
        async with running(work / mode, NO_SERVER, distiller=NO_MODEL["offline"], **sections) as d:
            client = await d.client()
            answer = await client.push(ndjson(pushed), "application/x-ndjson")
            first = answer["last_seq"] - len(pushed) + 1
            await wait_drained(client, answer["last_seq"])
            if sections:
                await wait_embedded(client, answer["last_seq"], work / mode / "forged.db")
            hits: dict[str, list[bool]] = {}
            for n, (language, _, own, english) in enumerate(MEMORIES):
                for key, q in ((language, own), (f"{language}, asked in English", english)):
                    query = {"q": q, "scope": "multilingual", "limit": TOP_MULTILINGUAL}
                    found = await client.get(f"/v1/search?{urlencode(query)}&types=interaction")
                    hits.setdefault(key, []).append(
                        first + n in {r["id"] for r in found["results"]}
                    )
            out[mode] = {k: statistics.fmean(v) for k, v in hits.items()}
            await client.aclose()
    return out


def _p(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def report(
    figures: dict[str, Any], languages: dict[str, dict[str, float]], agent: dict[str, Any]
) -> str:
    """The three tables, as docs/embed.md shows them."""
    lines = ["| LoCoMo, offline distiller | by words | by words and meaning |", "|---|---|---|"]
    if figures:
        words, meaning = figures["words"], figures["meaning"]
        lines += [
            f"| evidence recall of search's {TOP} best turns | {statistics.fmean(words[0]):.3f}"
            f" | {statistics.fmean(meaning[0]):.3f} |",
            f"| answer words in a {BUDGET}-token block | {statistics.fmean(words[1]):.3f}"
            f" | {statistics.fmean(meaning[1]):.3f} |",
            f"| search p50 / p99 (ms) | {_p(words[2], 0.5) * 1000:.0f} /"
            f" {_p(words[2], 0.99) * 1000:.0f} | {_p(meaning[2], 0.5) * 1000:.0f} /"
            f" {_p(meaning[2], 0.99) * 1000:.0f} |",
            f"| daemon peak RSS (MiB) | {figures['rss_words_mib']:.0f}"
            f" | {figures['rss_mib']:.0f} |",
        ]
        lines.append(
            f"\n{figures['conversations']} conversations, {figures['questions']} questions,"
            f" {figures['turns']} turns; pushing, distilling and embedding them took"
            f" {figures['embed_s']:.0f} s."
        )
    lines += _agent_rows(agent)
    lines += ["", f"| multilingual set, R@{TOP_MULTILINGUAL} | by words | by words and meaning |"]
    lines.append("|---|---|---|")
    for key in languages["words"]:
        lines.append(f"| {key} | {languages['words'][key]:.2f} | {languages['meaning'][key]:.2f} |")
    for asked in ("in its language", "in English"):
        pick = [k for k in languages["words"] if ("English" in k) == (asked == "in English")]
        w = statistics.fmean(languages["words"][k] for k in pick)
        m = statistics.fmean(languages["meaning"][k] for k in pick)
        lines.append(f"| **all, asked {asked}** | {w:.2f} | {m:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--work", type=Path, default=Path("var/bench-meaning"))
    parser.add_argument("--skip-locomo", action="store_true")
    args = parser.parse_args()
    repo = Path(__file__).resolve().parents[1]

    async def run() -> str:
        figures = {} if args.skip_locomo else await locomo(repo, args.conversations, args.work)
        languages = await multilingual(args.work / "multilingual")
        chats = 0 if args.skip_locomo else AGENT_CHATS
        agents = await agent(repo, chats, args.work / "agent")
        if figures:
            json.dump(figures, (args.work / "locomo.json").open("w"))
        return report(figures, languages, agents)

    print(trio.run(run))


if __name__ == "__main__":
    main()
