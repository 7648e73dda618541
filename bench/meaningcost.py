"""What recall by meaning costs: the model's throughput, search at 300,000 turns with vectors
beside the same search by words alone, and the memory the index of a million vectors holds.

- Throughput: LoCoMo's (or generated) turns embedded by the model in batches, as the embed
  observer does, on one thread and on two.
- Search: the one-scope store (bench.onescope: 300,000 turns), copied with a vector for every
  turn, each a random direction about the model's common one (embedding 300,000 real turns
  takes hours here; scoring's cost does not depend on what the vectors say); two mid-frequency
  words asked through the socket of a daemon with `[embed] enabled = true` (the query's vector
  computed by the real model, every time) and, interleaved, of one without, on the same file.
- Memory: a fresh process reads a million such vectors into the index (forged.recall.dense) in
  the chunks a catch-up reads, and searches it once; its resident memory before and after
  (before: once one chunk was read, so that a chunk's working memory is not counted).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import numpy.typing as npt
import trio

from bench import zipf
from bench.corpus import Turn
from bench.onescope import _interleaved, _query_sets
from bench.recall import LIMIT, NO_LLM, _read_through, _stats
from bench.report import Goal, Row
from bench.runner import Daemon, index_ready, running
from bench.sizes import Context
from bench.stores import cached
from forged.models import EMBED_OBSERVER
from forged.recall.dense import CATCH_UP_ROWS
from forged.vectors.codec import CENTRE, encode
from forged.vectors.model import DIMENSIONS, Embedder

__all__ = ["measure", "synthetic_vectors"]

EMBED_BATCH = 16  # texts per call of the model: the embed observer's default batch
SEARCH_GOAL_MS = 100.0  # search p99 at 300,000 turns with vectors
INDEX_GOAL_MIB = 300.0  # the index of a million vectors
SPREAD = 0.6  # how far a synthetic vector strays from the model's common direction
EMBED = {"enabled": True, "threads": 1, "query_timeout_ms": 60_000}  # every query embedded


def synthetic_vectors(n: int, seed: int) -> npt.NDArray[np.float32]:
    """`n` unit vectors, random directions about the model's common one (CENTRE)."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(size=(n, DIMENSIONS)).astype(np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    vectors = CENTRE / np.linalg.norm(CENTRE) + SPREAD * noise
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def _throughput(turns: list[Turn], threads: int, count: int) -> float:
    """Turns embedded per second, in batches of EMBED_BATCH, on `threads` threads."""
    model = Embedder(threads)
    texts = [t.text for t in turns[:count]]
    model.passages(texts[:EMBED_BATCH])  # the first call's allocations are not counted
    started = time.perf_counter()
    for at in range(0, len(texts), EMBED_BATCH):
        model.passages(texts[at : at + EMBED_BATCH])
    return len(texts) / (time.perf_counter() - started)


def _with_vectors(path: Path, source: str) -> None:
    """A copy of the one-scope store with a vector for every turn, embedded as far as its end."""
    shutil.copyfile(source, path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    rows = conn.execute("SELECT seq, scope FROM interactions ORDER BY seq").fetchall()
    for at in range(0, len(rows), CATCH_UP_ROWS):
        chunk = rows[at : at + CATCH_UP_ROWS]
        blobs = encode(synthetic_vectors(len(chunk), at))
        conn.executemany(
            "INSERT INTO vectors (item, item_id, scope, vector) VALUES ('interaction', ?, ?, ?)",
            [(seq, scope, blob) for (seq, scope), blob in zip(chunk, blobs, strict=True)],
        )
    conn.execute("INSERT OR REPLACE INTO watermarks VALUES (?, ?)", (EMBED_OBSERVER, rows[-1][0]))
    conn.execute("COMMIT")
    conn.close()


def _rss_mib(daemon: Daemon) -> float:
    """The daemon's resident memory now (VmRSS): its peak would count building the turn
    index, which only the first of the two daemons on the file does."""
    assert daemon.process is not None
    with open(f"/proc/{daemon.process.pid}/status") as status:
        kib = next(line.split()[1] for line in status if line.startswith("VmRSS:"))
    return int(kib) / 1024


async def _search(ctx: Context) -> list[Row]:
    """Search p50 and p99 at the one-scope size, with vectors and by words alone."""
    turns = ctx.size.onescope_turns
    source = cached(ctx.cache, f"onescope-{turns}", zipf.build, turns)
    store = cached(ctx.cache, f"meaning-{turns}", _with_vectors, source.path)
    path = Path(store.path)
    _read_through(path)
    queries = _query_sets(path, turns)["two mid-frequency words"]
    samples: dict[str, list[float]] = {}
    rss: dict[str, float] = {}
    for name, embed in (("words", {}), ("meaning", {"embed": EMBED})):
        sections = {"store": {"path": store.path}, "distill": {"enabled": False}, **embed}
        async with running(ctx.work / f"meaning-{name}", NO_LLM, **sections) as daemon:
            client = await daemon.client()
            await index_ready(client)

            async def ask(q: str) -> object:
                asked = {"q": q, "scope": zipf.SCOPE_A, "limit": LIMIT}
                return await client.get("/v1/search?" + urlencode(asked))  # noqa: B023

            samples |= await _interleaved(queries, {name: ask})
            rss[name] = _rss_mib(daemon)
            await client.aclose()
    (w50, w99), (m50, m99) = _stats(samples["words"]), _stats(samples["meaning"])
    label = f"meaning: search at {turns:,} turns with vectors"
    return [
        Row(f"{label}, p50", m50, "ms", "by words alone, p50", w50),
        Row(
            f"{label}, p99",
            m99,
            "ms",
            f"the goal, {SEARCH_GOAL_MS:g} ms",
            SEARCH_GOAL_MS,
            goal=Goal(1.0, at_least=False),
        ),
        Row(f"{label}, p99 beside words alone", m99, "ms", "by words alone, p99", w99),
        Row(
            "meaning: daemon RSS after the searches, with vectors",
            rss["meaning"],
            "MiB",
            "by words alone",
            rss["words"],
        ),
    ]


_INDEX_RSS = """
import ctypes, gc, json, sys
from bench.meaningcost import synthetic_vectors
from forged.recall.dense import CATCH_UP_ROWS, DenseIndex
from forged.vectors.codec import encode

def rss():
    # the allocator's free pages handed back first: RSS then counts what is held (without it,
    # what the allocator kept or let go of a chunk's temporaries moved the figure by tens of
    # MiB either way, below zero at 10,000 vectors)
    gc.collect()
    libc = ctypes.CDLL(None)
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
    with open("/proc/self/status") as f:
        return {l.split(":")[0]: int(l.split()[1]) / 1024 for l in f if l.startswith("Vm")}

def fill(index, n):
    for at in range(0, n, CATCH_UP_ROWS):
        count = min(CATCH_UP_ROWS, n - at)
        blobs = encode(synthetic_vectors(count, at))
        index._add([(at + k + 1, "interaction", at + k + 1, "s", b) for k, b in enumerate(blobs)])

fill(DenseIndex(), CATCH_UP_ROWS)  # one chunk's working memory, taken before counting
n, index, before = int(sys.argv[1]), DenseIndex(), rss()["VmRSS"]
fill(index, n)
index._candidates("s", "interaction", synthetic_vectors(1, 0)[0])
after = rss()
print(json.dumps({"before": before, "after": after["VmRSS"], "peak": after["VmHWM"]}))
"""


def _index_memory(n: int) -> dict[str, float]:
    """The RSS of a fresh process before and after its index holds `n` vectors (and searched
    them once: the joined codes), and its peak."""
    done = subprocess.run(
        [sys.executable, "-c", _INDEX_RSS, str(n)], capture_output=True, text=True, check=True
    )
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


async def measure(ctx: Context, turns: list[Turn]) -> list[Row]:
    count = ctx.size.embedded_turns
    one = await trio.to_thread.run_sync(_throughput, turns, 1, count)
    two = await trio.to_thread.run_sync(_throughput, turns, 2, count)
    rows = [
        Row("meaning: turns embedded, 1 thread", one, "/s", "2 threads", two),
    ]
    rows += await _search(ctx)
    vectors = ctx.size.index_vectors
    memory = await trio.to_thread.run_sync(_index_memory, vectors)
    held = memory["after"] - memory["before"]
    rows.append(
        Row(
            f"meaning: index of {vectors:,} vectors, RSS",
            held,
            "MiB",
            f"the goal, {INDEX_GOAL_MIB:g} MiB",
            INDEX_GOAL_MIB,
            goal=Goal(1.0, at_least=False),
        )
    )
    return rows
