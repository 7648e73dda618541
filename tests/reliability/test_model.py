"""A hostile model: a scripted server on loopback answers one scope's batches with what a broken
or malicious model would send, on both stores. For each answer: the daemon stays up, the other
scope is distilled, the hostile batch ends in a dead letter with its reason or in memory its
transcript supports, memory stays bounded, and the daemon starts again on what was stored."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from forged.llm.distiller import answer_limit
from tests.support import daemons
from tests.support.daemons import DaemonProcess, socket_client, wait_for_watermark, write_config
from tests.support.data import rows
from tests.support.fakellm import FakeLLM, envelope

MARK = "ZQX-HOSTILE"  # in the hostile scope's turn only: the fake answers it with `raw`
SAID = f"We keep PostgreSQL for the billing service, {MARK}."
CALM = "The reports service moves to ClickHouse next quarter."
SUPPORTED = "The billing service keeps PostgreSQL."  # what the hostile turn does support
MAX_RSS_KB = 400_000  # the daemon's peak resident set after any one answer
DEEP = b"[" * 100_000 + b"]" * 100_000
MAX_TOKENS = 8192  # the answer's cap: room for the 200 KB of nesting to reach the decoder
LARGER = f"InvalidAnswer: the answer is larger than {answer_limit(MAX_TOKENS)} bytes"
BIG = (2**63 - 1, 2**70)  # usage counts: the largest int64, and past 64 bits

Raw = Callable[[dict[str, Any]], Any]


def _memory(*facts: dict[str, Any], summary: str = SUPPORTED) -> bytes:
    return envelope(json.dumps({"summary": summary, "facts": list(facts)}))


def _fact(text: str = SUPPORTED, **extra: Any) -> dict[str, Any]:
    return {"kind": "state", "text": text, **extra}


def _huge(request: dict[str, Any]) -> Any:
    return (b'{"choices": [' if i == 0 else b" " * (1 << 20) for i in range(200))


# name: (the raw answer, the dead letter's reason, or None when the batch commits)
CASES: dict[str, tuple[Raw, str | None]] = {
    "superscript-id": (lambda r: _memory(_fact(replaces=["²", "³"])), None),
    "nested-message": (
        lambda r: b'{"choices": [{"message": {"content": "x", "d": %s}}]}' % DEEP,
        "InvalidAnswer: the answer is not a chat completion: nested too deeply",
    ),
    "nested-unknown-field": (
        lambda r: b'{"choices": [{"message": {"content": "x"}}], "d": %s}' % DEEP,
        "InvalidAnswer: the answer is not a chat completion: nested too deeply",
    ),
    "nested-replaces": (
        lambda r: envelope(
            f'{{"summary": "S.", "facts": [{{"kind": "state", "text": "{SUPPORTED}",'
            f' "replaces": {"[" * 50_000 + "]" * 50_000}}}]}}'
        ),
        "InvalidAnswer: the answer is not valid memory: nested too deeply",
    ),
    "usage-2**63-1": (
        lambda r: _memory(_fact()).replace(b'"prompt_tokens":10', b'"prompt_tokens":%d' % BIG[0]),
        None,
    ),
    "usage-2**70-negative": (
        lambda r: _memory(_fact()).replace(
            b'"prompt_tokens":10,"completion_tokens":10',
            b'"prompt_tokens":%d,"completion_tokens":-9' % BIG[1],
        ),
        None,
    ),
    "200-MB-answer": (
        _huge,
        f"{LARGER} (max_tokens {MAX_TOKENS})",
    ),
    "inverted-fact": (lambda r: _memory(_fact("The user does not keep PostgreSQL.")), None),
    "invented-fact": (lambda r: _memory(_fact("The user moved to Mars in 2031.")), None),
    "html": (
        lambda r: b"<html><body>502 Bad Gateway</body></html>",
        "InvalidAnswer: the answer is not a chat completion: ",
    ),
    "no-choices": (
        lambda r: b'{"choices": []}',
        "InvalidAnswer: the answer is not a chat completion: no choices",
    ),
    "20000-facts": (lambda r: _memory(*[_fact()] * 20_000), LARGER),
    "300-facts": (lambda r: _memory(*[_fact()] * 300), None),
}


def _interactions() -> list[dict[str, Any]]:
    return [
        {"id": "h", "scope": "hostile", "messages": [{"role": "user", "text": SAID}]},
        {"id": "c", "scope": "calm", "messages": [{"role": "user", "text": CALM}]},
    ]


def _peak_rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")))


@pytest.mark.parametrize("case", list(CASES))
async def test_a_hostile_answer_stops_nothing(
    short_tmp: Path, fake_llm: FakeLLM, case: str
) -> None:
    """Up, the calm scope distilled, the hostile batch dead-lettered with its reason or
    committed with only what its turn supports, memory bounded, a restart works."""
    raw, reason = CASES[case]
    fake_llm.poison, fake_llm.poison_behaviour, fake_llm.raw = MARK, "raw", raw
    config = write_config(
        short_tmp,
        fake_llm.base_url,
        distill={"max_attempts": 2},
        distiller={"max_tokens": MAX_TOKENS},
    )
    daemon = DaemonProcess(config, short_tmp)
    async with daemon:
        with trio.fail_after(120):
            await daemon.start()
            async with socket_client(daemon.socket) as client:
                pushed = await client.post("/v1/interactions", json=_interactions())
                assert pushed.status_code == 202, pushed.text
                status = await wait_for_watermark(client, 2)
                assert (await client.get("/v1/health")).status_code == 200
                calm = (await client.get("/v1/facts", params={"scope": "calm"})).json()["facts"]
                hostile = (await client.get("/v1/facts", params={"scope": "hostile"})).json()
                letters = (
                    await client.get("/v1/dead-letters", params={"scope": "hostile"})
                ).json()["dead_letters"]
            assert [f["text"] for f in calm] == [f"Recorded: user: {CALM.rstrip('.')}."]
            texts = {f["text"] for f in hostile["facts"]}
            assert len(hostile["facts"]) <= 64  # max_facts
            if reason is None:
                assert letters == [] and texts <= {SUPPORTED}
            else:
                assert [d["reason"][: len(reason)] for d in letters] == [reason], letters
                assert texts == set()
            distill = next(o for o in status["observers"] if o["name"] == "distill")
            assert 0 <= distill["prompt_tokens"] <= 2 * 3 * (2**31 - 1)
            assert _peak_rss_kb(daemon.pid or 0) < MAX_RSS_KB
            assert await daemon.stop() == 0
            await daemon.start()  # what the answer left behind must not stop the next start
            async with socket_client(daemon.socket) as client:
                assert (await client.get("/v1/status")).status_code == 200
            assert await daemon.stop() == 0


def _worst_runs(db: str) -> None:
    """Two runs with the largest token counts the store's columns hold, as answers wrote them
    before counts were clamped (SQLite: 2**63-1; PostgreSQL's integer columns: 2**31-1)."""
    big = 2**31 - 1 if daemons.STORE_URL else 2**63 - 1
    values = [
        (
            "distill",
            f"b{n}",
            "m",
            "s",
            1,
            1,
            1,
            1,
            big,
            big,
            big,
            "committed",
            None,
            "2026-01-01T00:00:00.000Z",
            0,
        )
        for n in (1, 2)
    ]
    sql = (
        "INSERT INTO distill_runs (observer, batch_id, model, scope, interactions, first_seq,"
        " last_seq, llm_calls, prompt_tokens, completion_tokens, ms, outcome, error,"
        " created_at, ungrounded) VALUES (" + ", ".join(["%s"] * 15) + ")"
    )
    if daemons.STORE_URL:
        with psycopg.connect(daemons.STORE_URL, autocommit=True) as pg:
            pg.cursor().executemany(sql, values)
        return
    with sqlite3.connect(db) as conn:
        conn.executemany(sql.replace("%s", "?"), values)
    conn.close()


async def test_a_daemon_starts_on_a_store_holding_the_worst_counts(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Totals that would overflow a 64-bit sum are shown clamped; start-up never fails on them."""
    config = write_config(short_tmp, fake_llm.base_url)
    daemon = DaemonProcess(config, short_tmp)
    async with daemon:
        with trio.fail_after(60):
            await daemon.start()
            assert await daemon.stop() == 0
            _worst_runs(daemon.config.store.path)
            await daemon.start()
            async with socket_client(daemon.socket) as client:
                status = (await client.get("/v1/status")).json()
            assert await daemon.stop() == 0
    distill = next(o for o in status["observers"] if o["name"] == "distill")
    expected = 2 * (2**31 - 1) if daemons.STORE_URL else 2**63 - 1
    assert (distill["prompt_tokens"], distill["completion_tokens"]) == (expected, expected)
    assert rows(daemon.config.store.path, "SELECT count(*) FROM distill_runs") == [(2,)]
