"""The daemon: opens the store, starts every service in one root nursery, handles signals."""

from __future__ import annotations

import os
import resource
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import NamedTuple, cast

import msgspec
import structlog
import trio

from forged.config import Config, DistillStyle, ServerConfig
from forged.consolidate.judgement import Proposer
from forged.consolidate.observer import Asker, ConsolidateObserver
from forged.daemon import log as logging
from forged.daemon import systemd
from forged.daemon.loader import load_consolidator, load_observers, make_distiller
from forged.distill.batches import BatchDistiller, Related
from forged.distill.deadletters import Redistiller
from forged.distill.observer import DistillObserver
from forged.embed.observer import EmbedObserver
from forged.errors import AlreadyRunning, ConfigError
from forged.http.routes import Api
from forged.http.scrape import write_textfile
from forged.http.server import HttpServer
from forged.hub import Hub, Observer
from forged.index.keeper import IndexKeeper
from forged.ingest.pipeline import Ingest
from forged.lifecycle import Lifecycle
from forged.llm.distiller import Distiller
from forged.llm.retry import RetryPolicy
from forged.models import DISTILL_OBSERVER
from forged.recall.engine import Recall
from forged.recall.meaning import Meaning
from forged.store.backend import Backend, open_store

__all__ = [
    "API_FD_NAME",
    "FD_RESERVE",
    "INTERRUPT",
    "LISTEN_BACKLOG",
    "STATUS_INTERVAL",
    "STOP_SIGNALS",
    "Running",
    "run_daemon",
]

LISTEN_BACKLOG = 1024  # connections the kernel queues while we are at the connection cap
STATUS_INTERVAL = 5.0  # seconds between STATUS= updates (more often when the watchdog asks)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # a bounded drain, then exit 0
INTERRUPT = signal.SIGINT.name  # Ctrl-C: stop at once, without waiting for the model
API_FD_NAME = "api"  # FileDescriptorName= of the API socket in forged.socket
FD_RESERVE = 256  # descriptors besides client connections: database, journal, LLM, refusals

log = structlog.get_logger(__name__)


def _bind(server: ServerConfig) -> trio.SocketListener:
    """Bind the Unix socket (mode from config), replacing a stale file but never a live daemon."""
    path = Path(server.socket)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a regular file in the way, or no permission
        raise ConfigError(
            f"server.socket: cannot create the directory {path.parent}: {exc.strerror}"
        ) from exc
    if path.is_socket():
        with socket.socket(socket.AF_UNIX) as probe:
            probe.setblocking(False)  # a live daemon with a full backlog answers EAGAIN, not a hang
            try:
                probe.connect(str(path))
            except ConnectionRefusedError:
                path.unlink()  # left by a daemon that died: nobody listens
            except OSError as exc:  # EACCES, EAGAIN: perhaps alive, so never take its place
                raise ConfigError(
                    f"server.socket: {path} may be in use by another daemon and cannot be "
                    f"checked ({exc.strerror}); remove it or choose another path"
                ) from exc
            else:
                raise AlreadyRunning(
                    f"another forged is already serving on {path}; stop it"
                    " first, or give this one another [server] socket"
                )
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
        chosen = next((s for s in passed if s.name == API_FD_NAME), passed[0])
        log.info("socket_activated", name=chosen.name, socket=chosen.socket.getsockname())
        return trio.SocketListener(trio.socket.from_stdlib_socket(chosen.socket)), None
    return _bind(server), Path(server.socket)


def _check_file_limit(server: ServerConfig) -> None:
    """Warn when the open-file limit cannot hold `max_connections` (accept would hit EMFILE)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = server.max_connections + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < needed:
        log.warning(
            "file_limit_low",
            limit=soft,
            needed=needed,
            hint="raise LimitNOFILE= (ulimit -n) or lower server.max_connections",
        )


def _related(config: Config, store: Backend) -> Related | None:
    """What the distiller is shown of a scope's current facts: with consolidation on, what
    recall finds for the transcript within `related_facts_tokens`."""
    budget = config.consolidate.related_facts_tokens
    if not (config.consolidate.enabled and budget):
        return None
    recall = Recall(store, config.recall)
    timeout = config.consolidate.related_facts_timeout_ms / 1000
    return lambda scope, text: recall.related(scope, text, budget, timeout)


def _distill_work(
    config: Config, distiller: Distiller | None, store: Backend
) -> BatchDistiller | None:
    """The distill observer's work, unless distillation is turned off."""
    if distiller is None:
        return None
    policy = RetryPolicy.of(config.distill)
    return BatchDistiller(
        distiller,
        policy,
        config.distill.max_batch_tokens,
        config.distiller.max_facts,
        _related(config, store),
    )


def _consolidator(
    config: Config, work: BatchDistiller, store: Backend, proposer: Proposer | None
) -> ConsolidateObserver:
    """The consolidate observer, on the distiller's model (or the plugin) and retry policy."""
    asks = callable(getattr(work.distiller, "ask", None))
    if not asks and proposer is None:
        raise ConfigError(
            "consolidate.enabled: the distiller has no async method `ask`, which"
            " consolidation needs; use the OpenAI-compatible client or a consolidate.class"
        )
    llm = cast(Asker, work.distiller) if asks else None  # without it, summaries stay as they are
    max_chars = config.distiller.max_summary_chars
    return ConsolidateObserver(llm, config.consolidate, work.retry, max_chars, store, proposer)


def _observers(
    config: Config,
    work: BatchDistiller | None,
    plugins: list[Observer],
    store: Backend,
    proposer: Proposer | None,
) -> list[Observer]:
    """The built-in distill, consolidate and embed observers (each unless turned off), then the
    plugins."""
    built_in: list[Observer] = []
    if work is not None:
        built_in.append(DistillObserver(work, config.distill))
        if config.consolidate.enabled:
            built_in.append(_consolidator(config, work, store, proposer))
    if config.embed.enabled:
        built_in.append(EmbedObserver(store, config.embed))
    return [*built_in, *plugins]


async def _start_index(
    config: Config, store: Backend, hub: Hub, ingest: Ingest, nursery: trio.Nursery
) -> IndexKeeper | None:
    """The turn index's keeper, told by the hub what is erased and by ingest when a burst
    eases (unless turned off)."""
    if not config.index.enabled:
        return None
    keeper = IndexKeeper(store, config.index.directory(config.store), ingest.idle_for)
    await nursery.start(keeper.serve, hub.appended)
    hub.derived.append(keeper)
    return keeper


class Running(NamedTuple):
    """What a started daemon shows its caller (the status line, tests): store, hub, lifecycle."""

    store: Backend
    hub: Hub
    lifecycle: Lifecycle
    turn_index: IndexKeeper | None = None


def _status_line(running: Running) -> str:
    """What `systemctl status` shows: the log's size, then each observer's state and progress."""
    parts = [f"interactions {running.store.count}"]
    for s in running.hub.statuses():
        part = f"{s.name} {s.state}, backlog {s.backlog}, batches {s.batches}"
        if s.waiting_since:
            part += f" (waiting for its model since {s.waiting_since})"
        part += f", last batch {s.last_batch_at or 'none yet'}"
        if s.dead_letters:
            part += f", dead letters {s.dead_letters}"
        parts.append(part)
    shutting_down = running.lifecycle.shutting_down
    return "STATUS=" + ("shutting down; " if shutting_down else "") + "; ".join(parts)


async def _heartbeat(running: Running) -> None:
    """WATCHDOG=1 from the event loop itself, so a hung loop gets us restarted; STATUS= too."""
    interval = systemd.watchdog_interval()
    period = min(interval, STATUS_INTERVAL) if interval is not None else STATUS_INTERVAL
    while True:
        assignments = [_status_line(running)]
        if interval is not None:
            assignments.append("WATCHDOG=1")
        systemd.notify(*assignments)
        await trio.sleep(period)


def _reopen_logging(running: Running | None) -> None:
    """SIGHUP (`systemctl reload`): re-open logging, framed as a reload for systemd."""
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    systemd.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")
    logging.reopen()
    log.info("logging_reopened")
    systemd.notify("READY=1", *([_status_line(running)] if running is not None else []))


class _Signals:
    """Signals caught from the first moment, so none arriving around READY=1 kills us outright.

    SIGHUP re-opens logging; SIGTERM or SIGINT sets `stop`, and during startup also cancels it.
    """

    def __init__(self) -> None:
        self.running: Running | None = None  # set once ready
        self.startup = trio.CancelScope()
        self.stop = trio.Event()
        self.name = ""

    async def watch(self, signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            if signum == signal.SIGHUP:
                _reopen_logging(self.running)
                continue
            self.name = signal.Signals(signum).name
            self.startup.cancel()  # no effect once started
            self.stop.set()
            return


async def _shutdown(
    running: Running, server: HttpServer, grace: float, *, wait_for_batch: bool
) -> None:
    """Refuse new pushes, answer those in progress, let the batch in flight commit; bounded.

    Ctrl-C does not wait for the batch: a person waits, and the model may need minutes. The
    batch stays in the log and is distilled again on the next start.
    """
    running.lifecycle.begin_shutdown()
    systemd.notify("STOPPING=1", _status_line(running))
    running.hub.stop()
    with trio.move_on_after(grace) as timer:
        await server.wait_quiet()  # a push already past the door still gets its 202
        if wait_for_batch:
            await running.hub.wait_idle()
    log.info(
        "shutdown",
        drained=not timer.cancelled_caught,
        grace_s=grace,
        waited_for_batch=wait_for_batch,
    )


class _Plugins(NamedTuple):
    """The plugins of the config, loaded and checked before anything runs."""

    observers: list[Observer]
    proposer: Proposer | None


class _Held:
    """What the daemon lets go of on exit, however far its start got."""

    def __init__(self) -> None:
        self.bound: Path | None = None  # the socket file we bound (systemd's is not ours)
        self.distiller: Distiller | None = None

    async def release(self, store: Backend) -> None:
        with trio.CancelScope(shield=True):
            if self.bound is not None:
                with suppress(OSError):
                    self.bound.unlink()
            if (aclose := getattr(self.distiller, "aclose", None)) is not None:
                await aclose()
            await trio.to_thread.run_sync(store.close)
            systemd.close_notify()


async def _start_bundled(config: Config, nursery: trio.Nursery) -> Config:
    """Start the bundled model server; the config with the distiller pointed at it."""
    from forged.daemon.bundled import REQUEST_EXTRA, STRUCTURED_OUTPUT, STYLE, serve_bundled_llm

    url = await nursery.start(partial(serve_bundled_llm, threads=config.bundled.threads))
    return _with_llm(config, url, REQUEST_EXTRA, STYLE, STRUCTURED_OUTPUT)


def _announce(running: Running, address: object) -> None:
    """Tell systemd and the log that the daemon is ready."""
    store = running.store
    systemd.notify("READY=1", _status_line(running))
    log.info(
        "ready",
        socket=address,
        database=store.path,
        backend=store.backend,
        last_seq=store.last_seq,
        schema=store.schema_version,
    )


async def _start(
    config: Config,
    store: Backend,
    plugins: _Plugins,
    nursery: trio.Nursery,
    held: _Held,
    *,
    bundled_llm: bool,
) -> tuple[Running, HttpServer]:
    """Start every service in the nursery, in order; ready (READY=1 sent) once it returns."""
    # The socket first: a second daemon must refuse before it starts a model.
    listener, held.bound = _listener(config.server)
    if bundled_llm:
        config = await _start_bundled(config, nursery)
    if config.distill.enabled:
        held.distiller = make_distiller(config.distiller, store)
    work = _distill_work(config, held.distiller, store)
    observers = _observers(config, work, plugins.observers, store, plugins.proposer)
    hub = Hub(store, observers, config.distill.channel_capacity)
    ingest = Ingest(store, hub.notify_appended, hub.backlog, config.server.max_backlog)
    lifecycle = Lifecycle()
    await nursery.start(ingest.serve)
    await nursery.start(hub.serve)
    keeper = await _start_index(config, store, hub, ingest, nursery)
    redistiller = (
        None
        if work is None
        else Redistiller(store, work.rerunning(), hub.progress[DISTILL_OBSERVER])
    )
    meaning = Meaning(config.embed) if config.embed.enabled else None
    if meaning is not None:  # recall by words until the query model is loaded
        nursery.start_soon(meaning.load)
    api = Api(config, store, hub, ingest, lifecycle, redistiller, keeper, meaning)
    _check_file_limit(config.server)
    server = HttpServer(api.handle, config.server)
    await nursery.start(server.serve, listener)
    lifecycle.mark_ready()
    running = Running(store, hub, lifecycle, keeper)
    _announce(running, listener.socket.getsockname())
    nursery.start_soon(_heartbeat, running)
    if config.metrics.textfile:
        textfile = Path(config.metrics.textfile)
        args = (textfile, store, hub, lifecycle, config.metrics.interval)
        nursery.start_soon(write_textfile, *args)
    return running, server


async def _serve(config: Config, signals: _Signals, server: HttpServer | None) -> None:
    """Serve until SIGTERM or SIGINT; then, if the start had finished, a bounded drain."""
    await signals.stop.wait()
    log.info("stopping", signal=signals.name, ready=signals.running is not None)
    if signals.running is not None and server is not None:
        await _shutdown(
            signals.running,
            server,
            config.server.shutdown_grace,
            wait_for_batch=signals.name != INTERRUPT,
        )


async def run_daemon(
    config: Config,
    *,
    bundled_llm: bool = False,
    backstop: Callable[[], None] | None = None,
    task_status: trio.TaskStatus[Running] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Start, serve until SIGTERM or SIGINT, and return after a bounded drain. `backstop` is
    called as the drain ends and the rest is cancelled: `forged serve` arms
    forged.daemon.backstop, which ends the process if what was cancelled does not end (a
    test's daemon shares its process)."""
    store = await trio.to_thread.run_sync(open_store, config.store)
    held, signals, server = _Held(), _Signals(), None
    try:
        plugins = _Plugins(load_observers(config, store), load_consolidator(config, store))
        with trio.open_signal_receiver(*STOP_SIGNALS, signal.SIGHUP) as received:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(signals.watch, received)
                with signals.startup:
                    running, server = await _start(
                        config, store, plugins, nursery, held, bundled_llm=bundled_llm
                    )
                    signals.running = running
                    task_status.started(running)
                await _serve(config, signals, server)
                if backstop is not None:
                    backstop()
                nursery.cancel_scope.cancel()
    finally:
        await held.release(store)
    log.info("stopped")


def _with_llm(
    config: Config,
    url: str,
    extra: dict[str, str | int | float | bool],
    style: DistillStyle,
    known_mode: str,
) -> Config:
    """Point the distiller at the bundled server, with the request fields, the style and the
    structured-output mode that suit its model (unless the config chose them)."""
    request_extra = {**extra, **config.distiller.request_extra}
    if config.distiller.style != "auto":
        style = config.distiller.style
    mode = config.distiller.structured_output
    distiller = msgspec.structs.replace(
        config.distiller,
        base_url=url,
        request_extra=request_extra,
        style=style,
        # its port changes on every start, but its server is known: no probing needed
        structured_output=known_mode if mode == "auto" else mode,
    )
    return msgspec.structs.replace(config, distiller=distiller)
