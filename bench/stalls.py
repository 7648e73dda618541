"""What no input may freeze: `/v1/status` while one long line is distilled (offline, and by a
model that copies the line into its fact), and another client's search of another scope while
two, three, then five scopes are hammered with the costliest query there is by one process."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

import msgspec
import trio

from bench import zipf
from bench.corpus import SEED
from bench.onescope import _b_word
from bench.probe import timed_elsewhere
from bench.recall import NO_LLM, _stats
from bench.report import Row
from bench.runner import STATUS_POLL, Client, distill_status, fake_llm, running
from bench.sizes import Context
from bench.stores import _fresh, _load, _without_triggers, cached
from forged.store.sqlite_schema import FILL_BLOCKS

LINES = ((14_000, 1_400), (200_000, 20_000))  # characters of a long line, and of its baseline
IDLE_POLLS = 200  # status reads timed on the idle daemon: the baseline
# The scopes one process hammers: two, three, then all five (more than the daemon has readers).
HAMMERED = ("user:h1", "user:h2", "user:h3", "user:h4", "user:h5")
PHASES = (2, 3, len(HAMMERED))  # how many of them each phase hammers
CLIENTS_PER_SCOPE = 4  # connections hammering each of them
B_SAMPLES = 200  # one-word searches of scope B timed per phase
WORST_WORDS = 1_500  # the costliest query: this many of the most frequent words


def _line(chars: int) -> str:
    """One unpunctuated line of `chars` characters: words of the Zipf vocabulary, as a user
    pastes a long paragraph."""
    rng = random.Random(SEED + chars)
    words: list[str] = []
    total = 0
    while total < chars:
        words.append(zipf.word(int(rng.paretovariate(1.0)) % zipf.VOCABULARY))
        total += len(words[-1]) + 1
    return " ".join(words)[:chars].rstrip()


async def _poll_status(client: Client, times: list[float], until: trio.Event) -> None:
    """Read `/v1/status` back to back (a pause of STATUS_POLL between), timing each read."""
    while not until.is_set():
        started = time.perf_counter()
        await client.get("/v1/status")
        times.append(time.perf_counter() - started)
        await trio.sleep(STATUS_POLL)


async def _distil_timed(daemon_client: Client, poller: Client, chars: int) -> tuple[float, float]:
    """Push one line of `chars` characters; seconds until its watermark, and the worst status
    read meanwhile (ms)."""
    body = {"scope": f"long-{chars}", "messages": [{"role": "user", "text": _line(chars)}]}
    times: list[float] = []
    done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_poll_status, poller, times, done)
        started = time.perf_counter()
        seq = (await daemon_client.push(msgspec.json.encode(body)))["last_seq"]
        while (await distill_status(daemon_client))["watermark"] < seq:  # noqa: ASYNC110 - another process: no event to wait on
            await trio.sleep(STATUS_POLL)
        took = time.perf_counter() - started
        done.set()
    return took, max(times) * 1000


async def _long_lines(ctx: Context, name: str, llm_url: str, offline: bool) -> list[Row]:
    distiller = {"offline": True} if offline else {}
    rows: list[Row] = []
    async with running(ctx.work / f"stalls-{name}", llm_url, distiller=distiller) as daemon:
        client, poller = await daemon.client(), await daemon.client()
        idle: list[float] = []
        for _ in range(IDLE_POLLS):
            started = time.perf_counter()
            await poller.get("/v1/status")
            idle.append(time.perf_counter() - started)
        idle_worst = max(idle) * 1000
        await _distil_timed(client, poller, 100)  # a worker process started: not what is timed
        for chars, small in LINES:
            base, _ = await _distil_timed(client, poller, small)
            took, worst = await _distil_timed(client, poller, chars)
            at = f"stalls: a {chars:,}-character line, {name},"
            rows += [
                Row(f"{at} time to distil", took, "s", f"a {small:,}-character line", base),
                Row(
                    f"{at} worst /v1/status meanwhile",
                    worst,
                    "ms",
                    "worst /v1/status, idle",
                    idle_worst,
                ),
            ]
        await client.aclose()
        await poller.aclose()
    return rows


def _build_hammered(path: Path, turns: int) -> None:
    """`turns` generated turns in each hammered scope and zipf.B_TURNS in scope B, indexed."""
    conn = _fresh(path)
    triggers = _without_triggers(conn)
    now = datetime.now(UTC)
    for n, scope in enumerate(HAMMERED):
        _load(conn, zipf._INSERT, zipf._rows(scope, turns, SEED + 10 + n, now))
    _load(conn, zipf._INSERT, zipf._rows(zipf.SCOPE_B, zipf.B_TURNS, SEED + 1, now))
    conn.executescript(f"""
        BEGIN;
        INSERT INTO interactions_fts (rowid, text, scope) SELECT seq, text, scope
            FROM interactions_text;
        {FILL_BLOCKS};
        COMMIT;
    """)
    for sql in triggers:
        conn.execute(sql)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _worst() -> str:
    """The most frequent words of the vocabulary, most frequent first: the costliest query."""
    return " ".join(zipf.word(r) for r in range(WORST_WORDS))


async def _b_search_times(socket: str, b_word: str) -> list[float]:
    """Scope B's one-word search timed by another process: a client other than the hammers."""
    target = "/v1/search?" + urlencode({"q": b_word, "scope": zipf.SCOPE_B})
    return await timed_elsewhere(socket, target, B_SAMPLES)


async def _hammered_phase(socket: str, scopes: tuple[str, ...], b_word: str) -> list[float]:
    """Scope B's searches timed while CLIENTS_PER_SCOPE connections per scope of this one
    process (one client of the daemon) send the worst query."""
    answered = 0
    all_busy = trio.Event()
    clients = CLIENTS_PER_SCOPE * len(scopes)

    async def hammer(scope: str) -> None:
        nonlocal answered
        client = await Client.connect(socket)
        target = "/v1/search?" + urlencode({"q": _worst(), "scope": scope})
        try:
            while True:
                await client.request("GET", target)  # 200, or 503 query_timeout
                answered += 1
                if answered >= clients:
                    all_busy.set()
        finally:
            with trio.CancelScope(shield=True):
                await client.aclose()

    async with trio.open_nursery() as nursery:
        for scope in scopes:
            for _ in range(CLIENTS_PER_SCOPE):
                nursery.start_soon(hammer, scope)
        await all_busy.wait()
        times = await _b_search_times(socket, b_word)
        nursery.cancel_scope.cancel()
    return times


async def _hammering(ctx: Context) -> list[Row]:
    turns = max(1_000, ctx.size.onescope_turns // 10)
    store = cached(ctx.cache, f"hammered{len(HAMMERED)}-{turns}", _build_hammered, turns)
    b_word = _b_word(Path(store.path))
    rows: list[Row] = []
    async with running(
        ctx.work / "stalls-hammer", NO_LLM, store={"path": store.path}, distill={"enabled": False}
    ) as daemon:
        idle = _stats(await _b_search_times(daemon.socket, b_word))[1]
        rows.append(Row("stalls: scope B search p99, idle", idle, "ms", "the issue's limit", 50.0))
        for n in PHASES:
            loaded = _stats(await _hammered_phase(daemon.socket, HAMMERED[:n], b_word))[1]
            at = f"stalls: scope B search p99, {n} scopes of {turns:,} turns hammered"
            by = f"by one client ({n * CLIENTS_PER_SCOPE} connections)"
            rows.append(Row(f"{at} {by}", loaded, "ms", "idle p99", idle))
    return rows


async def measure(ctx: Context) -> list[Row]:
    rows = await _long_lines(ctx, "offline", NO_LLM, offline=True)
    async with fake_llm(default="copy") as llm:
        rows += await _long_lines(ctx, "a model copying the line", llm.base_url, offline=False)
    return rows + await _hammering(ctx)
