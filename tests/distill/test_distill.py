"""The distill observer through the daemon and the fake LLM: retries, splits, dead letters, chunks."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio
import trio.testing
from structlog.testing import capture_logs

from forged.config import load_config
from forged.daemon.runner import Running
from forged.distill.batches import (
    MAX_REPLACED,
    RERUN,
    BatchDistiller,
    Distilled,
    replacing,
)
from forged.errors import InvalidAnswer, LLMUnavailable
from forged.llm.retry import UNWATCHED, RetryPolicy
from forged.models import DistilledMemory, Fact, MemoryItem, Message, StoredInteraction
from forged.text.tokens import estimate_tokens
from tests.support.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.support.data import recalled, rows
from tests.support.fakellm import SEQ_TAG, FakeLLM
from tests.support.offloads import STALL, OnTheLoop, StallingGround

TIMEOUT = 30  # seconds any single test may take
POISON = "POISON-PILL"  # the fake LLM chokes on any prompt holding this


def turn(n: int, text: str | None = None, scope: str = "user:alice") -> dict[str, Any]:
    return {
        "id": f"turn-{n}",
        "scope": scope,
        "session": "chat",
        "messages": [
            {"role": "user", "text": text or f"Turn {n}: we keep PostgreSQL for service {n}."},
            {"role": "assistant", "text": f"Noted for service {n}."},
        ],
    }


def coverage(db: str) -> dict[int, int]:
    """How many summaries cover each seq."""
    covered: dict[int, int] = {}
    for first, last in rows(db, "SELECT first_seq, last_seq FROM summaries"):
        for seq in range(first, last + 1):
            covered[seq] = covered.get(seq, 0) + 1
    return covered


def observer(status: dict[str, Any]) -> dict[str, Any]:
    (distill,) = status["observers"]
    assert isinstance(distill, dict)
    return distill


@asynccontextmanager
async def daemon(
    tmp: Path, llm: FakeLLM, **sections: dict[str, Any]
) -> AsyncIterator[tuple[Running, httpx.AsyncClient, str]]:
    """The daemon in-process with a client of its socket and the database path."""
    config = load_config(write_config(tmp, llm.base_url, **sections), {})
    async with running_daemon(config) as api, socket_client(config.server.socket) as client:
        yield api, client, config.store.path


async def push_batch_of_16(client: httpx.AsyncClient, llm: FakeLLM, poison_at: int) -> None:
    """Seq 1 alone, then seqs 2-17 in one request while seq 1's call is still running."""
    llm.latency = 0.3  # the 16 are in the observer's channel long before seq 1's answer
    assert (await client.post("/v1/interactions", json=turn(1))).status_code == 202
    await llm.wait_for_calls(1)
    batch = [turn(n, f"{POISON} for turn {n}" if n == poison_at else None) for n in range(2, 18)]
    assert (await client.post("/v1/interactions", json=batch)).status_code == 202
    llm.latency = 0.0  # read when a call starts: seq 1's call keeps its 0.3 s


def seqs_in(request: dict[str, Any]) -> list[int]:
    return [int(s) for s in SEQ_TAG.findall(request["messages"][-1]["content"])]


async def test_503_while_loading_then_ok(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """503s are retried with backoff, the watermark waits, then the batch commits once."""
    fake_llm.script.extend(["status:503", "status:503"])
    with trio.fail_after(TIMEOUT):
        async with daemon(short_tmp, fake_llm) as (api, client, db):
            await client.post("/v1/interactions", json=turn(1))
            distill = observer(await wait_for_watermark(client, 1, hub=api.hub))
    assert fake_llm.calls == 3
    assert (
        distill["last_error"]
        == "HTTP 503: "
        + '{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'
    )
    assert distill["llm_calls"] == 1  # errors without an answer cost no tokens
    assert coverage(db) == {1: 1}


async def test_poison_in_a_batch_of_16_is_one_dead_letter(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """An interaction that overflows the context even alone is dead-lettered; the 15 others commit."""
    fake_llm.poison, fake_llm.poison_behaviour = POISON, "overflow500"
    with trio.fail_after(TIMEOUT):
        async with daemon(short_tmp, fake_llm) as (api, client, db):
            await push_batch_of_16(client, fake_llm, poison_at=9)
            distill = observer(await wait_for_watermark(client, 17, hub=api.hub))
    assert seqs_in(fake_llm.requests[1]) == list(range(2, 18))
    ((seq, reason),) = rows(db, "SELECT seq, reason FROM dead_letters")
    assert seq == 9
    assert reason.startswith("ContextOverflow: HTTP 500: ")
    assert "exceed_context_size_error" in reason
    assert coverage(db) == {n: 1 for n in range(1, 18) if n != 9}
    assert distill["dead_letters"] == 1
    assert distill["last_error"].startswith("ContextOverflow: HTTP 500: ")
    assert distill["watermark"] == 17


async def test_an_answer_that_never_validates_is_split_then_dead_lettered(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Garbage for one interaction: tried max_attempts times alone, then a dead letter with the raw answer."""
    fake_llm.poison, fake_llm.poison_behaviour = POISON, "garbage"
    with trio.fail_after(TIMEOUT):
        async with daemon(short_tmp, fake_llm, distill={"max_attempts": 2}) as (api, client, db):
            await push_batch_of_16(client, fake_llm, poison_at=17)
            distill = observer(await wait_for_watermark(client, 17, hub=api.hub))
    ((seq, reason, raw),) = rows(db, "SELECT seq, reason, raw FROM dead_letters")
    assert (seq, reason) == (17, "InvalidAnswer: the answer holds no JSON object")
    assert raw.startswith("I am sorry, but I cannot produce that.")
    assert coverage(db) == {n: 1 for n in range(1, 17)}
    assert distill["dead_letters"] == 1
    # every garbage answer was a paid call: 2 tries each for 16, 8, 4, 2 and 1 interactions
    (garbage_calls,) = rows(
        db, "SELECT sum(llm_calls) FROM distill_runs WHERE outcome != 'committed'"
    )
    assert garbage_calls == (10,)


async def test_context_overflow_with_400_splits_the_batch(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """A 400 exceed_context_size_error splits the batch in halves that then commit."""
    fake_llm.default = "ok"
    with trio.fail_after(TIMEOUT):
        async with daemon(short_tmp, fake_llm) as (api, client, db):
            await push_batch_of_16(client, fake_llm, poison_at=0)
            fake_llm.script.append("overflow400")  # the batch of 16 overflows once
            distill = observer(await wait_for_watermark(client, 17, hub=api.hub))
    assert [seqs_in(r) for r in fake_llm.requests[1:]] == [
        list(range(2, 18)),
        list(range(2, 10)),
        list(range(10, 18)),
    ]
    assert rows(db, "SELECT first_seq, last_seq FROM summaries ORDER BY first_seq") == [
        (1, 1),
        (2, 9),
        (10, 17),
    ]
    assert distill["dead_letters"] == 0


async def test_runs_record_tokens_and_time_of_every_paid_call(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """A garbage answer then a good one: one run with both calls' tokens, totals in the status."""
    fake_llm.script.append("garbage")
    fake_llm.latency = 0.02
    with trio.fail_after(TIMEOUT):
        async with daemon(short_tmp, fake_llm) as (api, client, db):
            await client.post("/v1/interactions", json=turn(1))
            distill = observer(await wait_for_watermark(client, 1, hub=api.hub))
    ((model, calls, prompt, completion, ms, outcome),) = rows(
        db,
        "SELECT model, llm_calls, prompt_tokens, completion_tokens, ms, outcome FROM distill_runs",
    )
    assert (model, calls, outcome) == ("smollm2:135m", 2, "committed")
    assert prompt > 2 * 100 and completion > 0 and ms >= 40
    assert (distill["llm_calls"], distill["prompt_tokens"]) == (2, prompt)
    assert (distill["completion_tokens"], distill["llm_ms"]) == (completion, ms)


async def test_an_oversized_interaction_is_chunked_and_merged(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """An interaction over max_batch_tokens is distilled in line chunks merged into one result."""
    text = "\n".join(f"Line {n}: the deploy target for step {n} is host-{n}." for n in range(40))
    repeated = "\n".join(["Same closing remark, repeated."] * 30)
    item = turn(1, text)
    item["messages"][1]["text"] = repeated
    with trio.fail_after(TIMEOUT):
        async with daemon(short_tmp, fake_llm, distill={"max_batch_tokens": 128}) as (_, c, db):
            await c.post("/v1/interactions", json=item)
            await wait_for_watermark(c, 1)
    prompts = [r["messages"][-1]["content"] for r in fake_llm.requests]
    assert len(prompts) >= 6
    assert all(len(p) < (128 + 64) * 4 for p in prompts)
    assert all(f'part="{n} of {len(prompts)}"' in p for n, p in enumerate(prompts, start=1))
    assert rows(db, "SELECT first_seq, last_seq, batch_id FROM summaries")[0][:2] == (1, 1)
    assert len(rows(db, "SELECT id FROM summaries")) == 1
    facts = [t for (t,) in rows(db, "SELECT text FROM facts ORDER BY id")]
    # several chunks open with the same line, so give the same fact: it is kept once
    same = "Recorded: assistant: Same closing remark, repeated."
    assert (
        sum(re.search(r">\n\[1\.\d+\] assistant: Same closing", p) is not None for p in prompts)
        >= 2
    )
    assert facts.count(same) == 1
    assert facts[0] == "Recorded: user: Line 0: the deploy target for step 0 is host-0."
    ((summary,),) = rows(db, "SELECT text FROM summaries")
    assert len(summary.split("\n")) == len(prompts)  # one summary per chunk, joined
    ((calls,),) = rows(db, "SELECT llm_calls FROM distill_runs")
    assert calls == len(prompts)


async def test_a_distiller_class_from_config_is_used(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """`[distiller] class` loads another Distiller; it sees scrubbed transcripts."""
    spec = {"class": "tests.support.stub_distiller:PreferenceDistiller", "model": "m"}
    text = "I prefer tabs. My key is AKIAIOSFODNN7EXAMPLE."
    with trio.fail_after(TIMEOUT):
        async with daemon(short_tmp, fake_llm, distiller=spec) as (api, client, db):
            await client.post("/v1/interactions", json=turn(1, text))
            await wait_for_watermark(client, 1, hub=api.hub)
    assert fake_llm.calls == 0
    ((fact,),) = rows(db, "SELECT text FROM facts WHERE kind = 'preference'")
    assert fact.startswith("I prefer tabs.") and "AKIAIOSFODNN7EXAMPLE" not in fact
    assert rows(db, "SELECT model FROM distill_runs") == [("stub:m",)]


@pytest.mark.parametrize("mode", ["json_schema", "json_object", "none"])
async def test_extractive_style_stores_picked_lines_verbatim(
    short_tmp: Path, fake_llm: FakeLLM, mode: str
) -> None:
    """style = extractive: the model names lines; forged stores them as said, with their seq."""
    spec = {"style": "extractive", "structured_output": mode}
    with trio.fail_after(TIMEOUT):
        async with daemon(short_tmp, fake_llm, distiller=spec) as (api, client, db):
            items = [turn(1), turn(2, "I prefer tabs over spaces in every Python file.")]
            await client.post("/v1/interactions", json=items)
            await wait_for_watermark(client, 2, hub=api.hub)
    request = fake_llm.requests[-1]
    assert '{"lines": ' in request["messages"][0]["content"]
    if mode != "none":
        fmt = request["response_format"]
        schema = fmt["json_schema"]["schema"] if mode == "json_schema" else fmt["schema"]
        shown = re.findall(r"^\[(\d+\.\d+)\]", request["messages"][-1]["content"], re.M)
        assert schema["properties"]["lines"]["items"]["properties"]["line"]["enum"] == shown
    assert rows(db, "SELECT text, first_seq, last_seq FROM facts ORDER BY id") == [
        ("user: Turn 1: we keep PostgreSQL for service 1.", 1, 1),
        ("user: I prefer tabs over spaces in every Python file.", 2, 2),
    ]
    assert rows(db, "SELECT count(*) FROM summaries") == [(0,)]


async def test_ungrounded_memory_is_dropped_and_counted(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """A fact the transcript does not support is not stored; runs and /v1/status count it."""
    spec = {"class": "tests.support.stub_distiller:InventingDistiller", "model": "m"}
    with trio.fail_after(TIMEOUT), capture_logs() as logs:
        async with daemon(short_tmp, fake_llm, distiller=spec) as (api, client, db):
            await client.post("/v1/interactions", json=turn(1))
            status = await wait_for_watermark(client, 1, hub=api.hub)
    assert observer(status)["ungrounded"] == 2
    assert rows(db, "SELECT ungrounded FROM distill_runs") == [(2,)]
    assert rows(db, "SELECT text FROM facts") == [("We keep PostgreSQL for service 1.",)]
    assert rows(db, "SELECT count(*) FROM summaries") == [(0,)]
    reasons = [e["reason"] for e in logs if e["event"] == "ungrounded"]
    assert reasons == ["names not in the sources: oracl", "shorter than 12 characters"]


async def test_the_line_picker_needs_no_model(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """The no-model baseline keeps the specific lines, verbatim, and skips small talk."""
    spec = {"class": "forged.distill.linepicker:LinePicker"}
    item = turn(1, "Hi there!\nYesterday we decided to move billing to PostgreSQL 16.\nOk?")
    with trio.fail_after(TIMEOUT):
        async with daemon(short_tmp, fake_llm, distiller=spec) as (api, client, db):
            await client.post("/v1/interactions", json=item)
            await wait_for_watermark(client, 1, hub=api.hub)
    assert fake_llm.calls == 0
    assert rows(db, "SELECT kind, text FROM facts") == [
        ("decision", "user: Yesterday we decided to move billing to PostgreSQL 16.")
    ]


async def test_a_message_name_counts_toward_the_batch_budget(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """A name costs tokens like text (it is sent with every line): 256 characters are 65."""
    named = turn(1)
    named["messages"][0]["name"] = "n" * 256
    text_tokens = sum(estimate_tokens(m["text"]) for m in named["messages"])
    with trio.fail_after(TIMEOUT):
        async with daemon(short_tmp, fake_llm) as (api, client, db):
            await client.post("/v1/interactions", json=named)
            await wait_for_watermark(client, 1, hub=api.hub)
    assert rows(db, "SELECT tokens FROM interactions") == [(text_tokens + 65,)]


class _Scripted:
    """Raises the scripted errors in turn, then answers; records each attempt it is told."""

    model = "scripted"

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.attempts: list[int] = []

    async def distill(self, transcript: str, *, attempt: int = 1) -> DistilledMemory:
        self.attempts.append(attempt)
        if self.errors:
            raise self.errors.pop(0)
        return DistilledMemory("We keep PostgreSQL.", [])


def _stored(seq: int, text: str = "We keep PostgreSQL.") -> StoredInteraction:
    message = Message(role="user", text=text)
    return StoredInteraction(seq, "s", None, "2026-01-01T00:00:00.000Z", 10, [message])


def _work(distiller: _Scripted, max_attempts: int = 3) -> BatchDistiller:
    retry = RetryPolicy(max_attempts, 0.01, 0.01)
    return BatchDistiller(distiller, retry, 3000, 64, offload=OnTheLoop())


async def test_each_try_of_a_bad_answer_tells_the_distiller_its_attempt() -> None:
    """The attempt number is passed explicitly: 1, then one more after each invalid answer."""
    distiller = _Scripted(InvalidAnswer("bad"), InvalidAnswer("bad"))
    outcome = await _work(distiller).distill_batch([_stored(1)], UNWATCHED)
    assert distiller.attempts == [1, 2, 3]
    assert [r.outcome for r in outcome.runs] == ["committed"]


async def test_an_unreachable_llm_is_waited_for_without_counting_an_attempt() -> None:
    """The observer's policy waits out an unreachable LLM; the attempt stays where it was."""
    distiller = _Scripted(InvalidAnswer("bad"), LLMUnavailable("down"))
    await _work(distiller).distill_batch([_stored(1)], UNWATCHED)
    assert distiller.attempts == [1, 2, 2]


async def test_a_rerun_raises_an_unreachable_llm_at_once() -> None:
    """A re-run someone waits for does not wait for the LLM: one call, then the error."""
    distiller = _Scripted(LLMUnavailable("down"))
    with pytest.raises(LLMUnavailable):
        await _work(distiller).rerunning().distill_batch([_stored(1)], UNWATCHED)
    assert distiller.attempts == [1]


async def test_a_rerun_that_fails_again_is_recorded_as_still_failing() -> None:
    """An interaction that fails alone in a re-run is given up on under the re-run's names."""
    distiller = _Scripted(InvalidAnswer("bad"))
    out = Distilled()
    await _work(distiller, 1).distill_group("b", "s", [_stored(3)], out, UNWATCHED, RERUN)
    assert [(d.seq, d.reason) for d in out.failed] == [(3, "InvalidAnswer: bad")]
    assert [r.outcome for r in out.runs] == ["still_failing"]
    assert out.results == []


def test_a_fact_keeps_the_session_its_sources_share() -> None:
    """One session among its sources: that one; two: none (the batch spans both either way)."""
    from forged.distill.batches import with_sessions
    from forged.models import Fact

    items = [
        StoredInteraction(
            n,
            "user:alice",
            session,
            "2026-01-01T00:00:00Z",
            5,
            [Message(role="user", text=f"turn {n}")],
        )
        for n, session in ((1, "a"), (2, "a"), (3, "b"))
    ]
    facts = [Fact("event", "x", [1, 2]), Fact("event", "y", [3]), Fact("event", "z", [2, 3])]
    assert [f.session for f in with_sessions(facts, items)] == ["a", "b", None]


@pytest.mark.integration  # it starts worker processes
async def test_a_check_past_its_deadline_is_split_then_dead_lettered(tmp_path: Path) -> None:
    """Grounding that never ends on one turn, in the real worker process: the batch is split
    until that turn alone is dead-lettered, the others commit, the watermark passes them all,
    and every process that ran the stalled check was killed."""
    pids = tmp_path / "pids"
    batch = [_stored(1), _stored(2, f"{STALL} {pids}"), _stored(3)]
    work = BatchDistiller(_Scripted(), RetryPolicy(1, 0.01, 0.01), 3000, 64)
    work.offload = StallingGround(deadline=1.0)
    with trio.fail_after(TIMEOUT):
        outcome = await work.distill_batch(batch, UNWATCHED)
    reason = "CheckOverrun: ground_or_stall ran past its deadline of 1 s"
    assert [(d.seq, d.reason) for d in outcome.dead_letters] == [(2, reason)]
    assert [(r.first_seq, r.last_seq) for r in outcome.results] == [(1, 1), (3, 3)]
    assert outcome.watermark == 3
    assert [r.outcome for r in outcome.runs] == [
        "split",
        "committed",
        "split",
        "dead_letter",
        "committed",
    ]
    stalled = [int(pid) for pid in pids.read_text().split()]
    assert len(stalled) == 3  # the batch, its second half, the turn alone
    assert not any(_running(pid) for pid in stalled)


def _running(pid: int) -> bool:
    """Whether a process is alive and not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


KNOWN = [  # the scope's current facts a new one may say it replaces
    recalled(1, "The user lives in Lisbon.", ""),
]


def _known(*texts: str) -> list[MemoryItem]:
    return [msgspec.structs.replace(KNOWN[0], id=n, text=t) for n, t in enumerate(texts, 1)]


def test_a_replacement_must_share_the_replaced_facts_subject() -> None:
    """ "The user's name is Mallory" replacing where the user lives, what they prefer and
    where they work retires none of them; the state changes of the scenario still do."""
    known = _known(
        "The user lives in Lisbon.",
        "The user prefers tea.",
        "The user works at Acme.",
        "The user's name is Jon.",
    )
    sweep = Fact("correction", "The user's name is Mallory.", replaces=[1, 2, 3, 4])
    assert replacing([sweep], known)[0].replaces == [4]
    for id_, text in [(1, "The user lives in Berlin."), (2, "The user prefers coffee.")]:
        fact = Fact("state", text, replaces=[id_])
        assert replacing([fact], known)[0].replaces == [id_]
    services = _known("The service uses MySQL.", "The service uses MySQL for storage.")
    switch = Fact("state", "The service uses Postgres.", replaces=[1, 2])
    assert replacing([switch], services)[0].replaces == [1, 2]


def test_a_fact_replaces_at_most_a_few() -> None:
    """However many facts share its subject, one fact retires at most MAX_REPLACED."""
    known = _known(*(f"The service uses database number {n}." for n in range(10)))
    fact = Fact("state", "The service uses database Postgres.", replaces=list(range(1, 11)))
    assert replacing([fact], known)[0].replaces == list(range(1, MAX_REPLACED + 1))
