"""The daemon: opens the store, starts every service in one root nursery, handles signals."""

from __future__ import annotations

import os
import signal
import socket
from contextlib import suppress
from pathlib import Path

import msgspec
import structlog
import trio

from forged import log as logging
from forged import systemd
from forged.api import Api
from forged.config import Config, ServerConfig
from forged.distill import DistillObserver
from forged.errors import ConfigError
from forged.httpserver import HttpServer
from forged.hub import Hub, Observer
from forged.ingest import Ingest
from forged.llm import Distiller, make_distiller
from forged.plugins import load_object
from forged.store import Store

LISTEN_BACKLOG = 1024  # connections the kernel queues while we are at the connection cap
STATUS_INTERVAL = 5.0  # seconds between STATUS= updates when systemd has no watchdog

log = structlog.get_logger("forged.daemon")


def _bind(server: ServerConfig) -> trio.SocketListener:
    """Bind the Unix socket (mode from config), replacing a stale file but never a live daemon."""
    path = Path(server.socket)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_socket():
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(path))
            except OSError:
                path.unlink()  # left by a daemon that died
            else:
                raise ConfigError(f"server.socket: {path} is in use by a running daemon")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o777 & ~server.socket_mode)  # never visible with a looser mode
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"server.socket: cannot bind {path}: {exc.strerror}") from exc
    finally:
        os.umask(old_umask)
    os.chmod(path, server.socket_mode)
    sock.listen(LISTEN_BACKLOG)
    return trio.SocketListener(trio.socket.from_stdlib_socket(sock))


def _listener(server: ServerConfig) -> tuple[trio.SocketListener, Path | None]:
    """The socket systemd handed us, or one we bind (and must remove on exit)."""
    passed = systemd.listen_fds()
    if passed:
        log.info("socket_activated", name=passed[0].name)
        return trio.SocketListener(trio.socket.from_stdlib_socket(passed[0].socket)), None
    return _bind(server), Path(server.socket)


def _observers(config: Config, distiller: Distiller | None) -> list[Observer]:
    observers: list[Observer] = []
    if distiller is not None:
        observers.append(DistillObserver(distiller, config.distill, config.distiller))
    for i, spec in enumerate(config.observers.plugins):
        observers.append(load_object(spec, f"observers.plugins[{i}]")())
    return observers


def _status_line(api: Api) -> str:
    observers = api.hub.statuses()
    parts = [f"log {api.store.last_seq}"]
    for s in observers:
        parts.append(f"{s.name}: {s.state}, backlog {s.backlog}, batches {s.batches}")
    return "STATUS=" + "; ".join(parts)


async def _heartbeat(api: Api) -> None:
    """WATCHDOG=1 from the event loop itself, so a hung loop gets us restarted; STATUS= too."""
    interval = systemd.watchdog_interval()
    while True:
        assignments = [_status_line(api)]
        if interval is not None:
            assignments.append("WATCHDOG=1")
        systemd.notify(*assignments)
        await trio.sleep(interval or STATUS_INTERVAL)


async def _until_stop_signal() -> int:
    """Wait for SIGTERM or SIGINT; SIGHUP re-opens logging."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            if signum == signal.SIGHUP:
                logging.reopen()
                log.info("logging_reopened")
                continue
            return int(signum)
    raise AssertionError("unreachable")  # pragma: no cover


async def _shutdown(api: Api, grace: float) -> None:
    """Stop taking pushes and let the batch in flight commit, within the grace."""
    api.shutting_down = True
    systemd.notify("STOPPING=1", "STATUS=shutting down")
    api.hub.stop()
    with trio.move_on_after(grace) as timer:
        await api.hub.wait_idle()
    log.info("shutdown", drained=not timer.cancelled_caught, grace_s=grace)


async def run_daemon(
    config: Config,
    *,
    bundled_llm: bool = False,
    task_status: trio.TaskStatus[Api] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until SIGTERM or SIGINT; return after a bounded drain."""
    store = await trio.to_thread.run_sync(Store, config.store.path, config.store.busy_timeout_ms)
    bound: Path | None = None
    distiller: Distiller | None = None
    try:
        async with trio.open_nursery() as nursery:
            if bundled_llm:
                from forged.bundled import serve_bundled_llm

                url = await nursery.start(serve_bundled_llm)
                config = _with_llm(config, url)
            distiller = make_distiller(config.distiller) if config.distill.enabled else None
            hub = Hub(store, _observers(config, distiller), config.distill.channel_capacity)
            ingest = Ingest(store, hub.notify_appended)
            api = Api(config, store, hub, ingest)
            await nursery.start(ingest.serve)
            await nursery.start(hub.serve)
            listener, bound = _listener(config.server)
            await nursery.start(HttpServer(api.handle, config.server).serve, listener)
            api.ready = True
            systemd.notify("READY=1", _status_line(api))
            log.info(
                "ready",
                socket=config.server.socket,
                database=config.store.path,
                last_seq=store.last_seq,
                schema=store.schema_version,
            )
            nursery.start_soon(_heartbeat, api)
            task_status.started(api)
            signum = await _until_stop_signal()
            log.info("stopping", signal=signal.Signals(signum).name)
            await _shutdown(api, config.server.shutdown_grace)
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            if bound is not None:
                with suppress(OSError):
                    bound.unlink()
            if (aclose := getattr(distiller, "aclose", None)) is not None:
                await aclose()
            await trio.to_thread.run_sync(store.close)
    log.info("stopped")


def _with_llm(config: Config, url: str) -> Config:
    distiller = msgspec.structs.replace(config.distiller, base_url=url)
    return msgspec.structs.replace(config, distiller=distiller)
