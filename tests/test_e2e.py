"""End to end with the real bundled model: a conversation through the socket becomes memory.

These tests run on SQLite alone. What they add is the model's path (the bundled server started
and waited for, real prompts, a small model's answers parsed, checked and committed), which is
the same whichever store commits the result; every store operation they reach is proven on both
stores with the fake LLM (test_flow, distill/, consolidate/, store/test_postgres...), and a
minute of model work per store would only repeat it.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from bench.currentstate import SCOPE
from bench.currentstate import interactions as state_changes
from forged.models import FACT_KINDS
from tests.support.daemons import (
    MODEL_THREADS,
    DaemonProcess,
    socket_client,
    wait_for_watermark,
    write_config,
)
from tests.support.data import rows

pytestmark = [pytest.mark.model, pytest.mark.integration]

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "locomo10.json"
TURNS = 6  # messages pushed: three interactions of two turns, one batch for the model
MODEL_READY_TIMEOUT = 180.0  # seconds: the bundled model is assembled and loaded first
DISTILL_TIMEOUT = 900.0  # seconds: a 135M model on two cores takes 10-20 s a call, more on retries
BUILT_IN = [  # used when the LoCoMo dataset is absent
    ("Caroline", "I finally decided to apply for the counseling master's program in Portland."),
    ("Melanie", "That's great! Why Portland and not Seattle?"),
    ("Caroline", "Portland has the LGBTQ family therapy track I want, and rent is cheaper."),
    ("Melanie", "Makes sense. Are you still working at the bookstore?"),
    ("Caroline", "No, I quit last week. I'm volunteering at the youth center now."),
    ("Melanie", "Oh nice, I prefer hearing about that over the bookstore drama, honestly."),
]


# Two states and the change of each: the mechanics need no more, and every thing said is more
# model work for each of the three calls (the scripted conversation has nine).
STATES = ("I live in Lisbon.", "Our service uses MySQL.")
CHANGES = ("I moved to Berlin.", "We switched the service to Postgres.")


@pytest.fixture
def sqlite_dir() -> Iterator[Path]:
    """A short directory (socket paths fit) for a daemon on its SQLite file."""
    with tempfile.TemporaryDirectory(prefix="fg") as path:
        yield Path(path)


def _conversation() -> list[tuple[str, str]]:
    """A few real turns from LoCoMo when present, else a small realistic conversation."""
    if not LOCOMO.exists():
        return BUILT_IN
    session = json.loads(LOCOMO.read_text())[0]["conversation"]["session_1"]
    return [(t["speaker"], t["text"]) for t in session[:TURNS]]


def _interactions(turns: list[tuple[str, str]]) -> list[dict[str, Any]]:
    first = turns[0][0]
    return [
        {
            "id": f"e2e-{i}",
            "scope": "user:e2e",
            "session": "locomo-1",
            "messages": [
                {"role": "user" if who == first else "assistant", "name": who, "text": text}
                for who, text in turns[i : i + 2]
            ],
        }
        for i in range(0, len(turns), 2)
    ]


def _rows(db: str, sql: str) -> list[tuple[Any, ...]]:
    return rows(db, sql)


async def test_a_conversation_becomes_memory_with_the_bundled_model(sqlite_dir: Path) -> None:
    """`forged serve --bundled-llm`: a pushed conversation becomes memory of its own lines."""
    pushed = _interactions(_conversation())
    config_path = write_config(sqlite_dir, "http://127.0.0.1:9/v1")  # replaced by the bundled URL
    daemon = DaemonProcess(config_path, sqlite_dir)
    with trio.fail_after(MODEL_READY_TIMEOUT + DISTILL_TIMEOUT):
        await daemon.start(extra_args=("--bundled-llm",), ready_timeout=MODEL_READY_TIMEOUT)
        try:
            async with socket_client(daemon.socket) as client:
                answer = (await client.post("/v1/interactions", json=pushed)).json()
                assert answer == {"accepted": len(pushed), "duplicates": 0, "last_seq": len(pushed)}
                status = await wait_for_watermark(client, len(pushed))
        finally:
            assert await daemon.stop() == 0
    assert daemon.events("bundled_llm_starting")[0]["threads"] == MODEL_THREADS  # [bundled]
    db = daemon.config.store.path
    (distill,) = status["observers"]
    assert distill["watermark"] == len(pushed) and distill["backlog"] == 0
    committed = _rows(
        db, "SELECT first_seq, last_seq FROM distill_runs WHERE outcome = 'committed'"
    )
    dead = _rows(db, "SELECT seq FROM dead_letters")
    covered = {s for first, last in committed for s in range(first, last + 1)}
    log_tail = daemon.log()[-3000:]
    assert covered | {seq for (seq,) in dead} == set(range(1, len(pushed) + 1)), log_tail
    said = {f"{m['name']}: {m['text']}" for i in pushed for m in i["messages"]}
    facts = _rows(db, "SELECT kind, text FROM facts")
    assert all(kind in FACT_KINDS and text in said for kind, text in facts), facts  # verbatim
    runs = _rows(
        db,
        "SELECT model, llm_calls, prompt_tokens, completion_tokens, ms FROM distill_runs WHERE outcome = 'committed'",
    )
    assert runs
    for model, calls, prompt, completion, ms in runs:
        assert model and calls >= 1 and prompt > 50 and completion > 0 and ms > 0
        print(
            f"bundled model: {calls} call(s), {prompt} prompt + {completion} completion tokens, {ms} ms"
        )


async def test_changing_states_with_the_bundled_model_lose_nothing(sqlite_dir: Path) -> None:
    """Supersession and consolidation with the bundled model: mechanics, not its judgement.

    The changes of two states are distilled beside the facts of the states; a consolidation
    run follows. Every interaction ends in a committed run or a dead letter, the run commits,
    nothing is deleted, and every change names facts that exist.
    """
    said = [i for i in state_changes() if i["messages"][0]["text"] in (*STATES, *CHANGES)]
    assert len(said) == len(STATES) + len(CHANGES)
    consolidate = {"enabled": True, "min_new_facts": 1000, "check_interval": 3600.0}
    config_path = write_config(sqlite_dir, "http://127.0.0.1:9/v1", consolidate=consolidate)
    daemon = DaemonProcess(config_path, sqlite_dir)
    with trio.fail_after(MODEL_READY_TIMEOUT + 3 * DISTILL_TIMEOUT):
        await daemon.start(extra_args=("--bundled-llm",), ready_timeout=MODEL_READY_TIMEOUT)
        try:
            async with socket_client(daemon.socket) as client:
                for part in (said[: len(STATES)], said[len(STATES) :]):
                    last = (await client.post("/v1/interactions", json=part)).json()["last_seq"]
                    await wait_for_watermark(client, last)
                db = daemon.config.store.path
                before = _rows(db, "SELECT count(*) FROM facts")
                response = await client.post(
                    "/v1/consolidate", params={"scope": SCOPE}, timeout=DISTILL_TIMEOUT
                )
                assert response.status_code == 200, response.text
        finally:
            assert await daemon.stop() == 0
    (run,) = response.json()["runs"]
    assert _rows(db, "SELECT count(*) FROM facts") == before  # superseding deletes nothing
    committed = _rows(
        db, "SELECT first_seq, last_seq FROM distill_runs WHERE outcome = 'committed'"
    )
    covered = {s for first, last in committed for s in range(first, last + 1)}
    dead = {seq for (seq,) in _rows(db, "SELECT seq FROM dead_letters")}
    assert covered | dead == set(range(1, len(said) + 1)), daemon.log()[-3000:]
    runs = _rows(db, "SELECT run_id, llm_calls FROM consolidation_runs")
    assert runs == [(run["run_id"], run["usage"]["calls"])]
    orphans = _rows(
        db,
        "SELECT count(*) FROM consolidation_changes WHERE fact_id NOT IN"
        " (SELECT id FROM facts) OR into_id NOT IN (SELECT id FROM facts)",
    )
    assert orphans == [(0,)]
    retired = _rows(db, "SELECT count(*) FROM facts WHERE superseded_by IS NOT NULL")
    assert retired == _rows(db, "SELECT count(DISTINCT fact_id) FROM consolidation_changes")
    (distilled,) = _rows(
        db,
        "SELECT sum(llm_calls), sum(prompt_tokens), sum(completion_tokens),"
        " sum(ms) FROM distill_runs",
    )
    usage = run["usage"]
    print(
        f"bundled model: {before[0][0]} facts, {retired[0][0]} retired; distillation"
        " {} call(s), {} prompt + {} completion tokens, {} ms;".format(*distilled),
        f" consolidation {usage['calls']} call(s), {usage['prompt_tokens']} prompt +"
        f" {usage['completion_tokens']} completion tokens, {usage['ms']} ms",
    )
