"""Dead letters: listed over the API and re-run through the daemon once the model behaves."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from forged.config import load_config
from forged.hub import Hub
from tests.support.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.support.data import interaction, rows
from tests.support.fakellm import FakeLLM

TIMEOUT = 30  # seconds any single test may take
POISON = "POISON-PILL"  # the fake LLM answers garbage to any prompt holding this


async def _with_dead_letter(tmp: Path, llm: FakeLLM) -> Any:
    """A daemon whose seq 2 (of 3) became a dead letter; yields the config."""
    llm.poison, llm.poison_behaviour = POISON, "garbage"
    return load_config(write_config(tmp, llm.base_url, distill={"max_attempts": 1}), {})


async def _push_three(client: Any, hub: Hub) -> None:
    for n, text in [(1, "I use vim."), (2, f"{POISON} I use emacs."), (3, "I use nano.")]:
        assert (
            await client.post(
                "/v1/interactions", json=interaction(f"turn-{n}", text, scope="user:bob")
            )
        ).status_code == 202
    await wait_for_watermark(client, 3, hub=hub)


async def test_dead_letters_are_listed(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """GET /v1/dead-letters shows seq, scope, reason, an excerpt of the raw answer and the time."""
    config = await _with_dead_letter(short_tmp, fake_llm)
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config) as running, socket_client(config.server.socket) as client:
            await _push_three(client, running.hub)
            listed = (await client.get("/v1/dead-letters", params={"scope": "user:bob"})).json()[
                "dead_letters"
            ]
            empty = (await client.get("/v1/dead-letters", params={"from": 3})).json()
    (letter,) = listed
    assert letter["seq"] == 2 and letter["scope"] == "user:bob"
    assert letter["reason"] == "InvalidAnswer: the answer holds no JSON object"
    assert letter["raw_excerpt"].startswith("I am sorry")
    assert letter["created_at"].endswith("Z")
    assert empty == {"dead_letters": []}


async def test_redistill_turns_a_dead_letter_into_results(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Once the model behaves, the dead letter gets results; the watermark and the rest stay."""
    config = await _with_dead_letter(short_tmp, fake_llm)
    db = config.store.path
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config) as running, socket_client(config.server.socket) as client:
            await _push_three(client, running.hub)
            fake_llm.poison = None
            report = (await client.post("/v1/dead-letters/redistill")).json()
            again = (await client.post("/v1/dead-letters/redistill")).json()
            (distill,) = (await client.get("/v1/status")).json()["observers"]
    (letter_id,) = [i for (i,) in rows(db, "SELECT id FROM dead_letters")]
    assert report == {
        "redistilled": 1,
        "still_failing": 0,
        "results": [
            {
                "seq": 2,
                "dead_letter_id": letter_id,
                "outcome": "redistilled",
                "facts": 1,
                "reason": None,
            }
        ],
    }
    assert again == {"redistilled": 0, "still_failing": 0, "results": []}
    assert rows(db, "SELECT first_seq, last_seq FROM summaries ORDER BY first_seq") == [
        (1, 1),
        (2, 2),
        (3, 3),
    ]
    assert rows(db, "SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL") == [(0,)]
    assert rows(db, "SELECT outcome FROM distill_runs WHERE first_seq = 2 AND last_seq = 2") == [
        ("dead_letter",),
        ("redistilled",),
    ]
    assert (distill["dead_letters"], distill["watermark"]) == (0, 3)


async def test_a_dead_letter_that_still_fails_stays_open(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """A re-run the model still fails is reported with its reason; the dead letter stays."""
    config = await _with_dead_letter(short_tmp, fake_llm)
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config) as running, socket_client(config.server.socket) as client:
            await _push_three(client, running.hub)
            report = (await client.post("/v1/dead-letters/redistill?from=2&to=2")).json()
            (distill,) = (await client.get("/v1/status")).json()["observers"]
    assert (report["redistilled"], report["still_failing"]) == (0, 1)
    assert report["results"][0]["reason"] == "InvalidAnswer: the answer holds no JSON object"
    assert rows(config.store.path, "SELECT count(*) FROM dead_letters") == [(1,)]
    assert distill["dead_letters"] == 1


async def test_redistill_with_the_llm_down_changes_nothing(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """An unreachable LLM answers 503 llm_unavailable at once; the dead letter stays."""
    config = await _with_dead_letter(short_tmp, fake_llm)
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config) as running, socket_client(config.server.socket) as client:
            await _push_three(client, running.hub)
            await fake_llm.go_down()
            response = await client.post("/v1/dead-letters/redistill")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "10"
    error = response.json()["error"]
    assert error["code"] == "llm_unavailable"
    assert error["message"].startswith("the LLM cannot be reached (ConnectError: ")
    assert rows(
        config.store.path, "SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL"
    ) == [(1,)]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("from=abc", "`from` must be an integer from 0 to 9223372036854775807; got 'abc'"),
        ("to=-1", "`to` must be an integer from 0 to 9223372036854775807; got '-1'"),
        ("from=%C2%B2", "`from` must be an integer from 0 to 9223372036854775807; got '²'"),
        (
            "to=99999999999999999999999",
            "`to` must be an integer from 0 to 9223372036854775807; got '99999999999999999999999'",
        ),
        ("from=5&to=2", "`from` (5) is greater than `to` (2)"),
        ("form=5", "unknown parameter `form`; /v1/dead-letters/redistill accepts from, to"),
    ],
)
async def test_a_bad_seq_range_is_refused(
    short_tmp: Path, fake_llm: FakeLLM, query: str, message: str
) -> None:
    """from and to must be seqs in order, nothing else is taken; the message names the parameter."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            response = await client.post(f"/v1/dead-letters/redistill?{query}")
    assert response.status_code == 400
    assert response.json() == {"error": {"code": "invalid_parameter", "message": message}}


async def test_the_redistill_command_reports_what_happened(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """`forged redistill --from 1 --to 2` prints a table and a total; exit 0 when all succeeded."""
    config = await _with_dead_letter(short_tmp, fake_llm)
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config) as running, socket_client(config.server.socket) as client:
            await _push_three(client, running.hub)
            fake_llm.poison = None
            argv = ["redistill", "--socket", config.server.socket, "--from", "1", "--to", "2"]
            done = await trio.run_process(
                [sys.executable, "-m", "forged", *argv],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    assert done.returncode == 0
    header, row = done.stdout.decode().splitlines()
    assert header.split() == ["SEQ", "OUTCOME", "FACTS", "REASON"]
    assert row.split()[:2] == ["2", "redistilled"]
    assert done.stderr.decode() == "1 redistilled, 0 still failing\n"


async def test_the_dead_letters_command_prints_a_table(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """`forged dead-letters` prints seq, scope, time and reason as a table, like other commands."""
    config = await _with_dead_letter(short_tmp, fake_llm)
    argv = [sys.executable, "-m", "forged", "dead-letters", "--all-scopes"]
    argv += ["--socket", config.server.socket]
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config) as running, socket_client(config.server.socket) as client:
            await _push_three(client, running.hub)
            done = await trio.run_process(argv, capture_stdout=True, check=False)
    header, row = done.stdout.decode().splitlines()
    assert header.split() == ["SEQ", "SCOPE", "SINCE", "(UTC)", "REASON"]
    assert re.match(
        r"^2    user:bob  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d  InvalidAnswer: the answer holds no JSON"
        r" object$",
        row,
    ), row
