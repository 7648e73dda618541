"""Search latency over a large store: median and 99th percentile of `Recall.search`.

Builds a database of N facts through the store's own commit path (the FTS triggers fire as in
production), then times searches with random few-word queries and with a word found in nearly
every fact. Run: `python -m bench.recall_search --facts 100000 --searches 1000`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import trio

from forged.config import RecallConfig
from forged.models import BatchOutcome, Fact, ScopeResult
from forged.recall import Recall, SearchQuery
from forged.store import Store

KINDS = ("decision", "correction", "preference", "state")
FACTS_PER_BATCH = 1000  # facts committed per transaction while building
VOCABULARY = 20_000  # distinct words; drawn with a Zipf-like law as in real text
WORDS_PER_FACT = (8, 24)  # a self-contained sentence
SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]
COMMON = "service"  # a word placed in nearly every fact: the worst case for ranking


def _vocabulary(rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < VOCABULARY:
        words.add("".join(rng.choices(SYLLABLES, k=rng.randint(2, 4))))
    return sorted(words)


def _sentence(rng: random.Random, words: list[str], weights: list[float], n: int) -> str:
    body = rng.choices(words, weights, k=rng.randint(*WORDS_PER_FACT))
    return f"Fact {n}: the {COMMON} " + " ".join(body) + "."


async def build(store: Store, facts: int, scopes: int, rng: random.Random) -> list[str]:
    """Commit `facts` facts spread over `scopes` scopes; return the vocabulary."""
    words = _vocabulary(rng)
    weights = [1 / (rank + 1) for rank in range(len(words))]
    for start in range(0, facts, FACTS_PER_BATCH):
        batch = [
            Fact(rng.choice(KINDS), _sentence(rng, words, weights, n))  # type: ignore[arg-type]
            for n in range(start, min(start + FACTS_PER_BATCH, facts))
        ]
        results = [
            ScopeResult(
                batch_id=f"b{start}-{s}",
                scope=f"scope-{s}",
                session=None,
                summary=f"Batch {start} of scope {s}.",
                facts=batch[s::scopes],
                first_seq=start + 1,
                last_seq=start + len(batch),
            )
            for s in range(scopes)
        ]
        await store.commit_batch("distill", BatchOutcome(results, [], [], watermark=None))
    return words


def _mebibytes(directory: Path) -> float:
    return sum(p.stat().st_size for p in directory.glob("forged.db*")) / 2**20


def _percentiles(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p99 = ms[min(len(ms) - 1, round(len(ms) * 0.99))]
    return f"median {statistics.median(ms):.2f} ms, p99 {p99:.2f} ms, max {ms[-1]:.2f} ms"


async def _time(recall: Recall, queries: list[SearchQuery]) -> tuple[list[float], int]:
    samples, found = [], 0
    for query in queries:
        started = time.perf_counter()
        found += len(await recall.search(query))
        samples.append(time.perf_counter() - started)
    return samples, found


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="forged-bench") as directory:
        store = Store(str(Path(directory) / "forged.db"))
        started = time.perf_counter()
        words = await build(store, args.facts, args.scopes, rng)
        size = _mebibytes(Path(directory))
        print(f"built {args.facts} facts in {args.scopes} scope(s) in"
              f" {time.perf_counter() - started:.1f} s ({size:.0f} MiB)")  # fmt: skip
        recall = Recall(store, RecallConfig())
        typical = [
            SearchQuery(q=" ".join(rng.choices(words[:2000], k=3)), scope="scope-0", limit=10)
            for _ in range(args.searches)
        ]
        few = max(1, args.searches // 10)
        questions = [
            SearchQuery(q=f"what did the {COMMON} say about {rng.choice(words)} and"
                          f" {rng.choice(words)}?", scope="scope-0", limit=10)
            for _ in range(args.searches)
        ]  # fmt: skip
        common = [SearchQuery(q=f"the {COMMON}", scope="scope-0", limit=10) for _ in range(few)]
        for name, queries in (
            ("3 random words", typical),
            (f"a question with 'the' and '{COMMON}' (in every fact)", questions),
            (f"only 'the {COMMON}' (in every fact)", common),
        ):
            samples, found = await _time(recall, queries)
            print(f"{name}: {len(samples)} searches, {found / len(samples):.1f} results each:"
                  f" {_percentiles(samples)}")  # fmt: skip
        started = time.perf_counter()
        deleted = await recall.forget("scope-0")
        print(f"forget scope-0 ({deleted.facts} facts): {time.perf_counter() - started:.1f} s")
        store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--scopes", type=int, default=1, help="scopes the facts are spread over")
    parser.add_argument("--searches", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    trio.run(main, parser.parse_args())
