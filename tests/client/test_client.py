"""The Python client against a real daemon: every route, decoded answers, translated errors."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio

from forged.client.methods import AsyncClient, Client, find_socket
from forged.config import DEFAULT_CONFIG_PATH, Config, load_config
from forged.errors import BadRequest, ClientError, Unavailable, Unreachable
from forged.models import (
    Accepted,
    ContextAnswer,
    Deleted,
    Health,
    Interaction,
    Message,
    SearchAnswer,
    Status,
)
from tests.support.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.support.fakellm import FakeLLM

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0
TURN = Interaction(
    [Message("user", "Let's use PostgreSQL as our database."), Message("assistant", "Agreed.")],
    id="chat-1:turn-1",
    scope="user:alice",
)


async def test_every_route_answers_in_the_daemons_structs(daemon: Config) -> None:
    """push, status, health, search, context, facts, summaries, dead letters, forget."""
    async with AsyncClient(daemon.server.socket) as client:
        assert await client.push(TURN) == Accepted(1, 0, 1)
        assert await client.push([TURN]) == Accepted(0, 1, 1)
        assert await client.health() == Health("ok")
        async with socket_client(daemon.server.socket) as http:
            await wait_for_watermark(http, 1)
        status = await client.status()
        assert isinstance(status, Status) and status.log.count == 1
        found = await client.search("which database", scope="user:alice")
        assert isinstance(found, SearchAnswer) and "PostgreSQL" in found.results[0].text
        context = await client.context("database", scope="user:alice", budget_tokens=400)
        assert isinstance(context, ContextAnswer) and context.text.startswith("<memory>")
        assert [f.scope for f in (await client.facts(scope="user:alice")).facts] == ["user:alice"]
        assert [s.first_seq async for s in client.iter_summaries(scope="user:alice")] == [1]
        assert (await client.dead_letters()).dead_letters == []
        assert (await client.forget("user:alice")).deleted == Deleted(1, 1, 1)


async def test_the_blocking_client_pages_through_facts(daemon: Config) -> None:
    """`Client` (run in a thread here) pushes, and follows the facts' `next` cursor to the end."""
    turns = [Interaction([Message("user", f"Fact number {n} to keep.")]) for n in range(5)]
    with Client(daemon.server.socket) as client:
        assert await trio.to_thread.run_sync(client.push, turns) == Accepted(5, 0, 5)
        async with socket_client(daemon.server.socket) as http:
            await wait_for_watermark(http, 5)
        facts = await trio.to_thread.run_sync(lambda: list(client.iter_facts()))
        page = await trio.to_thread.run_sync(lambda: client.facts(limit=2))
    assert len(facts) == 5
    assert len(page.facts) == 2 and page.next == str(page.facts[-1].id)


async def test_a_bad_parameter_is_bad_request_with_code_and_message(daemon: Config) -> None:
    """A 4xx answer is `BadRequest` carrying the daemon's status, code and message."""
    async with AsyncClient(daemon.server.socket) as client:
        with pytest.raises(BadRequest) as caught:
            await client.search("x", limit=0)
    error = caught.value
    assert (error.status, error.code) == (400, "invalid_parameter")
    assert error.message == "`limit` must be an integer from 1 to 100; got '0'"
    assert str(error) == "400 invalid_parameter: `limit` must be an integer from 1 to 100; got '0'"


async def test_a_full_backlog_is_unavailable_with_retry_after(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """A 503 is `Unavailable` with the Retry-After the daemon sent."""
    fake_llm.default = "hang"
    path = write_config(short_tmp, fake_llm.base_url, server={"max_backlog": 1})
    config = load_config(path, {})
    with trio.fail_after(TIMEOUT):
        async with running_daemon(config), AsyncClient(config.server.socket) as client:
            await client.push(Interaction([Message("user", "first")]))
            with pytest.raises(Unavailable) as caught:
                await client.push(Interaction([Message("user", "second")]))
    assert (caught.value.status, caught.value.code) == (503, "backlog_full")
    assert caught.value.retry_after == 5


async def test_no_daemon_is_unreachable(sock_dir: Path) -> None:
    """No daemon on the socket: `Unreachable`, naming the socket."""
    socket = sock_dir / "absent.sock"
    async with AsyncClient(socket) as client:
        with pytest.raises(Unreachable, match=rf"^cannot reach forged at {socket} \(.*\); is"):
            await client.status()


def test_socket_argument_then_environment_then_config(sock_dir: Path) -> None:
    """The argument wins, then FORGED_SOCKET, then the configuration the daemon would read."""
    path = write_config(sock_dir, "http://127.0.0.1:9/v1")
    env = {"FORGED_SOCKET": "/tmp/env.sock", "FORGED_CONFIG": str(path)}
    assert find_socket("/tmp/arg.sock", env=env) == "/tmp/arg.sock"
    assert find_socket(env=env) == "/tmp/env.sock"
    assert find_socket(env={"FORGED_CONFIG": str(path)}) == str(sock_dir / "forged.sock")
    assert find_socket(config=path, env={}) == str(sock_dir / "forged.sock")


@pytest.mark.skipif(DEFAULT_CONFIG_PATH.exists(), reason="a system configuration is in force")
def test_run_from_the_checkout_the_dev_socket(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no configuration file, in or from the checkout: the socket `make run` serves on."""
    assert find_socket(env={}) == str(REPO / "var" / "run" / "forged.sock")
    (sock_dir / "config").mkdir()
    (sock_dir / "config" / "forged.dev.toml").write_text('[server]\nsocket = "./s/f.sock"\n')
    monkeypatch.chdir(sock_dir)
    assert find_socket(env={}) == str(sock_dir / "s" / "f.sock")


async def test_a_daemon_that_does_not_answer_is_unreachable(sock_dir: Path) -> None:
    """A socket that accepts but never answers: `Unreachable` once the read timeout passes."""
    path = str(sock_dir / "mute.sock")
    with trio.socket.socket(trio.socket.AF_UNIX) as mute:
        await mute.bind(path)
        mute.listen(1)
        timeout = httpx.Timeout(0.2, connect=1.0)
        async with AsyncClient(path, timeout=timeout) as client:
            with pytest.raises(Unreachable, match=rf"^forged at {path} did not answer in time \("):
                await client.status()


def test_a_query_too_long_for_a_url_is_a_client_error(sock_dir: Path) -> None:
    """A query past what a URL carries is refused before it is sent, saying so."""
    with (
        Client(str(sock_dir / "none.sock")) as client,
        pytest.raises(
            ClientError,
            match=r"^the request is too long to send \(URL component 'query' too long\):"
            r" shorten the query$",
        ),
    ):
        client.search("word " * 14_000, scope="s")
