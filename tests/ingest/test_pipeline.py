"""Ingest: bodies decoded (large ones off the event loop), pushes that meet share one commit."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.lowlevel
from trio.testing import MockClock, wait_all_tasks_blocked

from forged.config import ServerConfig
from forged.errors import InvalidRequest
from forged.http.connection import REFUSAL_STATUS
from forged.ingest import pipeline
from forged.ingest.pipeline import (
    LINGER_MAX,
    OFFLOAD_BYTES,
    Ingest,
    parse_body,
    prepare_all,
    read_body,
)
from forged.models import Accepted, Interaction, Message
from forged.store.sqlite import Store
from tests.support.data import write_locked

TEXT = "We keep PostgreSQL for billing because JSONB matters. " * 100  # about 5 kB
HANG = 10.0  # real seconds with every task blocked before a frozen test clock moves on by itself


async def test_a_large_body_is_decoded_off_the_event_loop() -> None:
    """While a large body is decoded, other tasks keep running; a small one is decoded at once."""
    one = {"messages": [{"role": "user", "text": TEXT}]}
    small = json.dumps(one).encode()
    large = json.dumps([one] * (4 * OFFLOAD_BYTES // len(TEXT))).encode()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await trio.lowlevel.checkpoint()
            ticks += 1

    async def ticks_while_decoding(body: bytes) -> int:
        before = ticks
        items = await read_body(body, "application/json", ServerConfig())
        assert items[0].messages[0].text == TEXT
        return ticks - before

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tick)
            await trio.lowlevel.checkpoint()  # the ticker is running
            during = {"small": await ticks_while_decoding(small)}
            during["large"] = await ticks_while_decoding(large)
            nursery.cancel_scope.cancel()
    assert during == {"small": 0, "large": during["large"]}
    assert during["large"] > 0


ONE = b'{"messages": [{"role": "user", "text": "hi"}]}'


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b'{"messages":\n [{"role": "user", "text": "hi"}]}\n',
            "line 1: not valid JSON: it ends at byte 12 before the JSON value is complete",
        ),
        (ONE + b", " + ONE + b"\n", "line 1: not valid JSON: trailing characters (byte 47)"),
        (
            ONE + b"\n" + ONE + b"\n{\n",
            "line 3: not valid JSON: it ends at byte 1 before the JSON value is complete",
        ),
    ],
    ids=["a value over two lines", "two values on a line", "a broken last line"],
)
def test_an_ndjson_line_holds_one_interaction(body: bytes, message: str) -> None:
    """All lines are decoded at once, yet each line must hold exactly one interaction, and a bad
    one is named by its number."""
    with pytest.raises(InvalidRequest) as refused:
        parse_body(body, "application/x-ndjson", ServerConfig())
    assert refused.value.message == message


def test_blank_lines_and_crlf_between_ndjson_lines_are_skipped() -> None:
    body = b"\n" + ONE + b"\r\n\n  \n" + ONE.replace(b"hi", b"ho")
    items = parse_body(body, "application/x-ndjson", ServerConfig())
    assert [i.messages[0].text for i in items] == ["hi", "ho"]


def test_interactions_prepared_together_equal_each_prepared_alone() -> None:
    """One scrub scan for a whole request changes nothing: secrets in texts, names and metadata
    among plain interactions come out as they do one interaction at a time."""
    secret = "my password=hunter2 and sk-proj-" + "a1B2c3D4" * 6
    items = [
        Interaction(messages=[Message("user", f"plain words {i} €")], id=f"i{i}", session="s")
        for i in range(50)
    ]
    items[7] = Interaction(messages=[Message("user", secret, name="pat")], id="i7")
    items[20] = Interaction(messages=[Message("assistant", "ok")], metadata={"api_key": 42})
    items[33] = Interaction(messages=[Message("user", "hi", name=secret)], metadata={"n": secret})
    together = prepare_all(items, "2026-01-01T00:00:00Z")
    alone = [prepare_all([item], "2026-01-01T00:00:00Z")[0] for item in items]
    assert together == alone
    assert b"hunter2" not in b"".join(r.messages + (r.metadata or b"") for r in together)
    assert together[20].metadata == b'{"api_key":"[REDACTED:api_key]"}'


@pytest.fixture
async def ingest(tmp_path: Path) -> AsyncIterator[Ingest]:
    store = Store(str(tmp_path / "f.db"))
    ingest = Ingest(store, lambda: None, lambda: 0, 1_000_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(ingest.serve)
        yield ingest
        nursery.cancel_scope.cancel()
    store.close()


async def _push(ingest: Ingest, ids: list[str], done: trio.Event | None = None) -> Accepted:
    items = [Interaction(messages=[Message(role="user", text=f"turn {i}")], id=i) for i in ids]
    answer = await ingest.push(items)
    if done is not None:
        done.set()
    return answer


async def _behind_a_held_commit(
    ingest: Ingest, first: list[str], *then: list[str]
) -> list[Accepted]:
    """Push `first`, hold its commit, queue each of `then` behind it, release; return the answers."""
    answers: dict[int, Accepted] = {}

    async def push(k: int, ids: list[str]) -> None:
        answers[k] = await _push(ingest, ids)

    async with trio.open_nursery() as pushes:
        with write_locked(ingest.store.path):
            pushes.start_soon(push, 0, first)
            await wait_all_tasks_blocked()  # the committer took it and waits for the lock
            for k, ids in enumerate(then, start=1):
                pushes.start_soon(push, k, ids)
            await wait_all_tasks_blocked()  # every other push is queued behind the held commit
    return [answers[k] for k in range(len(then) + 1)]


async def test_pushes_queued_during_a_commit_share_the_next_one(ingest: Ingest) -> None:
    """Three pushes that arrive while a commit runs are committed together, in one transaction."""
    with trio.fail_after(30):
        first, *rest = await _behind_a_held_commit(ingest, ["first"], ["a"], ["b"], ["c"])
    assert first == Accepted(accepted=1, duplicates=0, last_seq=1)
    assert rest == [Accepted(accepted=1, duplicates=0, last_seq=4)] * 3
    assert ingest.commits == 2


async def test_same_id_in_two_requests_of_one_group_is_stored_once(ingest: Ingest) -> None:
    """Idempotency holds inside a group: a later request counts an earlier one's ids as duplicates."""
    with trio.fail_after(30):
        answers = await _behind_a_held_commit(ingest, ["x"], ["y", "z"], ["z", "y", "w", "x"])
        again = await _push(ingest, ["w", "v", "v"])
    one, two = answers[1:]  # one group, in whichever order the two tasks ran
    assert (one.accepted + two.accepted, one.duplicates + two.duplicates) == (3, 3)
    assert one.last_seq == two.last_seq == 4
    assert again == Accepted(accepted=1, duplicates=2, last_seq=5)
    assert ingest.commits == 3


async def test_a_group_waits_for_as_many_pushes_as_the_last_one_had(
    ingest: Ingest, nursery: trio.Nursery, mock_clock: MockClock
) -> None:
    """After a group of three, a lone push waits (the clock stands still) until two more come."""
    await _behind_a_held_commit(ingest, ["first"], ["a"], ["b"], ["c"])
    lone = trio.Event()
    nursery.start_soon(_push, ingest, ["p"], lone)
    await wait_all_tasks_blocked()
    assert not lone.is_set() and ingest.commits == 2  # lingering, not committed alone
    frozen = trio.current_time()
    mock_clock.autojump_threshold = HANG  # a hang moves the clock on; the last assert sees it
    with trio.fail_after(60):
        async with trio.open_nursery() as pushes:
            pushes.start_soon(_push, ingest, ["q"])
            pushes.start_soon(_push, ingest, ["r"])
        await lone.wait()
    assert ingest.store.last_seq == 7 and ingest.commits == 3
    assert trio.current_time() == frozen  # the group filled; its deadline played no part


async def test_a_group_stops_waiting_at_its_deadline(
    ingest: Ingest, nursery: trio.Nursery, mock_clock: MockClock
) -> None:
    """A lone push after a group of three is committed alone once LINGER_MAX has passed."""
    await _behind_a_held_commit(ingest, ["first"], ["a"], ["b"], ["c"])
    lone = trio.Event()
    nursery.start_soon(_push, ingest, ["p"], lone)
    await wait_all_tasks_blocked()
    assert not lone.is_set()
    mock_clock.jump(LINGER_MAX)
    jumped = trio.current_time()
    mock_clock.autojump_threshold = HANG  # a hang moves the clock on; the last assert sees it
    with trio.fail_after(60):
        await lone.wait()
    assert ingest.store.last_seq == 5 and ingest.commits == 3
    assert trio.current_time() == jumped  # no later deadline was needed


def test_every_refusal_of_ingest_has_an_http_status() -> None:
    """Ingest says why it refuses (a code); the HTTP layer knows the status of each such code."""
    source = (Path(pipeline.__file__)).read_text()
    codes = set(re.findall(r'InvalidRequest\(\s*"(\w+)"', source))
    assert codes == {"invalid_body", "body_too_large", "unsupported_media_type", "backlog_full"}
    assert codes <= set(REFUSAL_STATUS)
    assert not re.search(r"\b[45]\d\d\b", re.sub(r"#.*", "", source)), "a status code in ingest"
