"""The daemon as a real process under systemd's protocols: notify, watchdog, signals, sockets."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import sys
from pathlib import Path

import httpx
import pytest
import trio

from forged.config import ServerConfig
from forged.daemon.backstop import EXIT_FORCED, STOP_TIMEOUT
from forged.daemon.runner import _bind
from forged.errors import ConfigError
from tests.support.daemons import DaemonProcess, socket_client, wait_for_watermark, write_config
from tests.support.data import facts_per_seq, interaction, rows, summaries_per_seq
from tests.support.fakellm import SEQ_TAG, FakeLLM
from tests.support.journald_ns import namespaces_unavailable
from tests.support.offloads import STALL

TIMEOUT = 60.0  # seconds any one scenario may take
WATCHDOG_USEC = 200_000  # a watchdog this short makes the daemon ping every 0.1 s
PINGS = 5  # watchdog pings a test waits for
PINGS_WITHIN = 2.0  # seconds those pings may take: 0.4 s expected, 5 s would mean no watchdog
NOBODY = 65534  # uid and gid of `nobody`, a uid the daemon does not run as
STRANGER = 65533  # another uid, never allowed
_STATUS = re.compile(  # the STATUS= line `systemctl status` shows
    r"^STATUS=(?P<stopping>shutting down; )?interactions (?P<count>\d+); distill (?P<state>\w+),"
    r" backlog (?P<backlog>\d+), batches (?P<batches>\d+), last batch (?P<last>none yet|\S+Z)$"
)


def _status(assignments: list[str]) -> re.Match[str]:
    [line] = [a for a in assignments if a.startswith("STATUS=")]
    found = _STATUS.match(line)
    assert found, line
    return found


async def _push(client_socket: str, *items: int) -> None:
    async with socket_client(client_socket) as client:
        for n in items:
            assert (
                await client.post("/v1/interactions", json=interaction(f"chat-{n}"))
            ).status_code == 202


# notify and watchdog


async def test_ready_then_watchdog_pings_then_stopping(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """READY=1 once serving, WATCHDOG=1 and STATUS= at half WATCHDOG_USEC, STOPPING=1, exit 0."""
    async with DaemonProcess(write_config(short_tmp, fake_llm.base_url), short_tmp) as daemon:
        with trio.fail_after(TIMEOUT):
            await daemon.start({"WATCHDOG_USEC": str(WATCHDOG_USEC)})
            assert daemon.notify is not None and daemon.process is not None
            [(pid, ready)] = daemon.notify.received  # nothing before READY=1
            assert pid == daemon.process.pid
            assert ready[0] == "READY=1"
            assert _status(ready).groups() == (None, "0", "idle", "0", "0", "none yet")
            async with socket_client(daemon.socket) as client:
                assert (await client.get("/v1/health")).status_code == 200
            await daemon.notify.wait_for("WATCHDOG=1")  # the first ping, sent on READY=1
            with trio.fail_after(PINGS_WITHIN):
                for _ in range(PINGS):
                    pid, ping = await daemon.notify.wait_for("WATCHDOG=1")
                    assert pid == daemon.pid
                    assert _status(ping)["state"] == "idle"
            daemon.send_signal(signal.SIGTERM)
            _, stopping = await daemon.notify.wait_for("STOPPING=1")
            assert _status(stopping)["stopping"] == "shutting down; "
            assert await daemon.wait() == 0


async def test_status_line_reports_backlog_and_last_batch(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """After a batch, STATUS= shows the log size, no backlog, and when the last batch committed."""
    async with DaemonProcess(write_config(short_tmp, fake_llm.base_url), short_tmp) as daemon:
        with trio.fail_after(TIMEOUT):
            await daemon.start({"WATCHDOG_USEC": str(WATCHDOG_USEC)})
            await _push(daemon.socket, 1, 2, 3)
            async with socket_client(daemon.socket) as client:
                status = await wait_for_watermark(client, 3)
            assert daemon.notify is not None
            line = _status((await daemon.notify.wait_for("WATCHDOG=1"))[1])
            while (line["count"], line["backlog"]) != ("3", "0"):  # pings sent before the batch
                line = _status((await daemon.notify.wait_for("WATCHDOG=1"))[1])
            assert await daemon.stop() == 0
    (distill,) = status["observers"]
    last_batch = (str(distill["batches"]), distill["last_batch_at"])
    assert line.groups() == (None, "3", "idle", "0", *last_batch)


async def test_sighup_reopens_logging_and_keeps_serving(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """SIGHUP is a reload: RELOADING=1, logging re-opened, READY=1 again, and it serves on."""
    async with DaemonProcess(write_config(short_tmp, fake_llm.base_url), short_tmp) as daemon:
        with trio.fail_after(TIMEOUT):
            await daemon.start()
            assert daemon.notify is not None
            daemon.send_signal(signal.SIGHUP)
            _, reloading = await daemon.notify.wait_for("RELOADING=1")
            assert any(re.fullmatch(r"MONOTONIC_USEC=\d+", a) for a in reloading)
            await daemon.notify.wait_for("READY=1")
            async with socket_client(daemon.socket) as client:
                assert (await client.get("/v1/health")).status_code == 200
            assert len(daemon.events("logging_reopened")) == 1
            assert await daemon.stop() == 0


# sockets


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_binds_its_own_socket_0660_and_removes_it(
    short_tmp: Path, fake_llm: FakeLLM, signum: signal.Signals
) -> None:
    """Started without socket activation it binds the configured path, mode 0660, and cleans up."""
    async with DaemonProcess(write_config(short_tmp, fake_llm.base_url), short_tmp) as daemon:
        with trio.fail_after(TIMEOUT):
            await daemon.start()
            mode = os.stat(daemon.socket).st_mode
            assert stat.S_ISSOCK(mode)
            assert stat.S_IMODE(mode) == 0o660
            assert daemon.events("socket_activated") == []
            assert await daemon.stop(signum) == 0
    assert not await trio.Path(daemon.socket).exists()
    assert [e["signal"] for e in daemon.events("stopping")] == [signum.name]


async def test_replaces_a_stale_socket_file(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """A socket file nobody listens on (a crashed daemon's) is replaced."""
    config_path = write_config(short_tmp, fake_llm.base_url)
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(short_tmp / "forged.sock"))
    async with DaemonProcess(config_path, short_tmp) as daemon:
        with trio.fail_after(TIMEOUT):
            await daemon.start()
            await _push(daemon.socket, 1)
            assert await daemon.stop() == 0


async def test_refuses_the_socket_of_a_running_daemon(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """A second daemon on the same socket exits 2 with one line and leaves the first serving."""
    config_path = write_config(short_tmp, fake_llm.base_url)
    async with DaemonProcess(config_path, short_tmp) as daemon:
        with trio.fail_after(TIMEOUT):
            await daemon.start()
            second = await trio.run_process(
                [sys.executable, "-m", "forged", "serve", "--config", str(config_path)],
                capture_stderr=True,
                check=False,
            )
            assert second.returncode == 2
            assert second.stderr.decode() == (
                f"forged: another forged is already serving on {daemon.socket}; stop it first,"
                " or give this one another [server] socket\n"
            )
            await _push(daemon.socket, 1)
            assert await daemon.stop() == 0


_BIND = """
import sys
from forged.config import ServerConfig
from forged.daemon.backstop import EXIT_FORCED, STOP_TIMEOUT
from forged.daemon.runner import _bind
from forged.errors import ConfigError
try:
    _bind(ServerConfig(socket=sys.argv[1]))
except ConfigError as exc:
    print(exc)
"""


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv")
async def test_a_live_socket_it_may_not_connect_to_is_refused_not_replaced(
    short_tmp: Path,
) -> None:
    """A listening socket forged gets EACCES on stays in place; forged names the problem."""
    path = short_tmp / "forged.sock"
    # root reaches any socket: drop the capability that lets it, as an unprivileged user lacks it
    unprivileged = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(str(path))
        live.listen()
        os.chmod(path, 0)
        inode = os.stat(path).st_ino
        with trio.fail_after(TIMEOUT):
            done = await trio.run_process(
                [
                    *(unprivileged if os.geteuid() == 0 else []),
                    sys.executable,
                    "-c",
                    _BIND,
                    str(path),
                ],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        assert done.stdout.decode() == (
            f"server.socket: {path} may be in use by another daemon and cannot be checked"
            " (Permission denied); remove it or choose another path\n"
        ), done.stderr.decode()
        assert os.stat(path).st_ino == inode


def test_a_socket_directory_that_cannot_be_made_is_a_config_error(tmp_path: Path) -> None:
    """A regular file where the socket's directory should be: a message, not a traceback."""
    (tmp_path / "run").write_text("")
    with pytest.raises(ConfigError) as caught:
        _bind(ServerConfig(socket=str(tmp_path / "run" / "forged.sock")))
    assert str(caught.value) == (
        f"server.socket: cannot create the directory {tmp_path / 'run'}: File exists"
    )


async def _connect_when_listening(path: Path) -> None:
    """Connect once (the first connection starts the activated daemon) as soon as it listens."""
    while True:
        with trio.socket.socket(trio.socket.AF_UNIX) as probe:
            try:
                await probe.connect(str(path))
                return
            except (FileNotFoundError, ConnectionRefusedError):
                pass  # the tool is another process still setting up; ask again shortly
        await trio.sleep(0.01)


@pytest.mark.skipif(
    shutil.which("systemd-socket-activate") is None, reason="systemd-socket-activate not installed"
)
async def test_socket_activation_serves_on_the_passed_socket(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """Under systemd-socket-activate forged binds nothing, serves on fd 3 and leaves the file."""
    unused = short_tmp / "configured.sock"
    config_path = write_config(short_tmp, fake_llm.base_url, server={"socket": str(unused)})
    activated = short_tmp / "api.sock"
    wrapper = [
        "systemd-socket-activate",
        "-l",
        str(activated),
        "--fdname=api",
        "-E",
        "NOTIFY_SOCKET",
        "-E",
        "XDG_CACHE_HOME",  # the test run's cache (tests/conftest.py): it passes no others
    ]
    async with DaemonProcess(config_path, short_tmp) as daemon:
        with trio.fail_after(TIMEOUT):
            await daemon.spawn(wrapper=wrapper)
            await _connect_when_listening(activated)
            inode = os.stat(activated).st_ino
            await daemon.wait_ready()
            assert daemon.process is not None and daemon.pid == daemon.process.pid
            await _push(str(activated), 1)
            assert await daemon.stop() == 0
    [activation] = daemon.events("socket_activated")
    assert (activation["name"], activation["socket"]) == ("api", str(activated))
    assert daemon.events("ready")[0]["socket"] == str(activated)
    assert not unused.exists()
    assert stat.S_ISSOCK(os.stat(activated).st_mode)  # the socket belongs to the service manager
    assert os.stat(activated).st_ino == inode


# graceful shutdown


async def _push_until_refused(
    client: httpx.AsyncClient, answers: list[httpx.Response], pushing: trio.Event
) -> None:
    """Push one interaction after another until the daemon refuses one."""
    n = 100
    while True:
        answers.append(await client.post("/v1/interactions", json=interaction(f"chat-{n}")))
        if answers[-1].status_code != 202:
            return
        n += 1
        if n == 103:
            pushing.set()


async def test_sigterm_during_a_batch_commits_it_and_loses_nothing(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """SIGTERM mid-batch: it commits, pushes get 202 or 503, exit 0; a restart does the rest."""
    fake_llm.latency = 1.5
    config_path = write_config(
        short_tmp,
        fake_llm.base_url,
        distill={"max_batch_interactions": 5},
        server={"shutdown_grace": 20.0},
    )
    answers: list[httpx.Response] = []
    async with DaemonProcess(config_path, short_tmp) as daemon:
        with trio.fail_after(TIMEOUT):
            await daemon.start()
            await _push(daemon.socket, *range(20))
            async with socket_client(daemon.socket) as client, trio.open_nursery() as nursery:
                pushing = trio.Event()
                nursery.start_soon(_push_until_refused, client, answers, pushing)
                await pushing.wait()
                await fake_llm.wait_until(lambda llm: llm.in_flight == 1)
                prompt = fake_llm.requests[-1]["messages"][-1]["content"]  # the transcript
                signalled = trio.current_time()
                daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait() == 0
            stopped_in = trio.current_time() - signalled
            watermark = rows(daemon.config.store.path, "SELECT seq FROM watermarks")
            fake_llm.latency = 0
            await daemon.start()
            total = 20 + len(answers) - 1
            async with socket_client(daemon.socket) as client:
                status = await wait_for_watermark(client, total)
            assert await daemon.stop() == 0
    assert stopped_in < 20.0
    assert watermark == [(max(int(seq) for seq in SEQ_TAG.findall(prompt)),)]  # batch in flight
    [refused] = [a for a in answers if a.status_code != 202]
    assert refused is answers[-1]
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "2"
    message = "forged is shutting down; retry shortly"
    assert refused.json() == {"error": {"code": "shutting_down", "message": message}}
    assert [e["drained"] for e in daemon.events("shutdown")] == [True, True]
    assert status["log"] == {"last_seq": total, "count": total}
    assert (
        summaries_per_seq(daemon.config.store.path)
        == facts_per_seq(daemon.config.store.path)
        == dict.fromkeys(range(1, total + 1), 1)
    )


async def test_a_batch_longer_than_the_grace_is_redone_after_restart(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """When the LLM outlasts shutdown_grace, forged still exits 0 in time; the batch is redone."""
    fake_llm.default = "hang"
    config_path = write_config(short_tmp, fake_llm.base_url, server={"shutdown_grace": 0.5})
    async with DaemonProcess(config_path, short_tmp) as daemon:
        with trio.fail_after(TIMEOUT):
            await daemon.start()
            await _push(daemon.socket, 1, 2, 3)
            await fake_llm.wait_for_calls(1)
            assert await daemon.stop() == 0
            assert rows(daemon.config.store.path, "SELECT count(*) FROM summaries") == [(0,)]
            fake_llm.default = "ok"
            await daemon.start()
            async with socket_client(daemon.socket) as client:
                await wait_for_watermark(client, 3)
            assert await daemon.stop() == 0
    assert [e["drained"] for e in daemon.events("shutdown")] == [False, True]
    assert (
        summaries_per_seq(daemon.config.store.path)
        == facts_per_seq(daemon.config.store.path)
        == dict.fromkeys(range(1, 3 + 1), 1)
    )


async def test_ctrl_c_mid_batch_stops_at_once(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """SIGINT (Ctrl-C) does not wait out the grace for a model that is still thinking."""
    fake_llm.default = "hang"
    config_path = write_config(short_tmp, fake_llm.base_url, server={"shutdown_grace": 60.0})
    async with DaemonProcess(config_path, short_tmp) as daemon:
        with trio.fail_after(TIMEOUT):
            await daemon.start()
            await _push(daemon.socket, 1)
            await fake_llm.wait_for_calls(1)
            with trio.fail_after(10):  # far below the 60 s grace a SIGTERM would wait
                assert await daemon.stop(signal.SIGINT) == 0
    (shutdown,) = daemon.events("shutdown")
    assert (shutdown["drained"], shutdown["waited_for_batch"]) == (True, False)
    assert rows(daemon.config.store.path, "SELECT count(*) FROM summaries") == [(0,)]


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize(
    ("plugin", "status", "forced"),
    [("StallingCheck", 0, False), ("StallingThread", EXIT_FORCED, True)],
)
async def test_sigterm_during_a_stalled_check_ends_in_time_and_loses_nothing(
    short_tmp: Path, fake_llm: FakeLLM, plugin: str, status: int, forced: bool
) -> None:
    """SIGTERM while a check stalls: a check in the worker process is killed at the end of the
    grace and forged exits 0; a thread that nothing can stop is left behind, and the process
    ends STOP_TIMEOUT later all the same (status 70). The turn is distilled on the next start."""
    stall = short_tmp / "stall"
    stall.mkdir()
    (stall / "marker").touch()
    os.mkfifo(stall / "started")
    grace = 0.5
    config_path = write_config(
        short_tmp,
        fake_llm.base_url,
        server={"shutdown_grace": grace},
        distiller={"class": f"tests.support.stub_distiller:{plugin}"},
    )
    turn = {"messages": [{"role": "user", "text": f"{STALL} {stall}"}]}
    async with DaemonProcess(config_path, short_tmp) as daemon:
        with trio.fail_after(TIMEOUT):
            await daemon.start()
            async with socket_client(daemon.socket) as client:
                assert (await client.post("/v1/interactions", json=turn)).status_code == 202
            started = await trio.to_thread.run_sync(
                (stall / "started").read_text, abandon_on_cancel=True
            )  # the check has begun its stall
            with trio.fail_after(grace + STOP_TIMEOUT + 10):  # a few seconds, not until SIGKILL
                assert await daemon.stop() == status
            stalled = int(started.split()[0])
            assert stalled == daemon.pid or not _alive(stalled)  # the worker was killed
            (stall / "marker").unlink()
            await daemon.start()
            async with socket_client(daemon.socket) as client:
                await wait_for_watermark(client, 1)
            assert await daemon.stop() == 0
    assert [e["drained"] for e in daemon.events("shutdown")] == [False, True]
    assert len(daemon.events("shutdown_forced")) == forced
    assert rows(daemon.config.store.path, "SELECT count(*) FROM dead_letters") == [(0,)]


# access control


async def _request_as(uid: int, socket_path: str) -> tuple[int, str]:
    """GET /v1/health as another user (setpriv drops to `uid`); the status and the body."""
    as_uid = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    curl = ["curl", "-sS", "--unix-socket", socket_path, "-w", "\n%{http_code}"]
    command = [*as_uid, *curl, "http://forged/v1/health"]
    done = await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    body, _, code = done.stdout.decode().rpartition("\n")
    return int(code), body


@pytest.mark.skipif(os.geteuid() != 0, reason="running a client as another uid needs root")
@pytest.mark.skipif(
    not (shutil.which("setpriv") and shutil.which("curl")), reason="needs setpriv, curl"
)
async def test_only_allowed_uids_are_served(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """A listed uid is served; any other, root included, gets 403 `forbidden` and a log entry."""
    await trio.Path(short_tmp).chmod(
        0o711
    )  # other users may reach the socket, not list the directory
    config_path = write_config(
        short_tmp, fake_llm.base_url, server={"allowed_uids": [NOBODY], "socket_mode": 0o666}
    )
    async with DaemonProcess(config_path, short_tmp) as daemon:
        with trio.fail_after(TIMEOUT):
            await daemon.start()
            allowed = await _request_as(NOBODY, daemon.socket)
            stranger = await _request_as(STRANGER, daemon.socket)
            async with socket_client(daemon.socket) as client:
                head = await client.head("/v1/health")  # the refusal of HEAD, too, ends no more
                root = await client.get("/v1/health")  # than its connection
            assert await daemon.stop() == 0
    assert allowed == (200, '{"status":"ok"}')
    assert stranger == (
        403,
        '{"error":{"code":"forbidden","message":"uid 65533 may not use this socket"}}',
    )
    assert (head.status_code, head.content) == (403, b"")
    assert root.status_code == 403
    assert root.json()["error"]["message"] == "uid 0 may not use this socket"
    refused = daemon.events("client_refused")
    assert [(e["uid"], e["level"], e["reason"]) for e in refused] == [
        (STRANGER, "warning", "uid not in allowed_uids"),
        (0, "warning", "uid not in allowed_uids"),
        (0, "warning", "uid not in allowed_uids"),
    ]


# journald


async def test_daemon_logs_structured_fields_into_a_real_journald(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """With [log] format = "journal", journalctl -o json shows a real batch_committed's fields."""
    if reason := namespaces_unavailable():
        pytest.skip(reason)
    config_path = write_config(short_tmp, fake_llm.base_url, log={"format": "journal"})
    private_journald = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        sys.executable,
        str(Path(__file__).parents[1] / "support" / "journald_ns.py"),
    ]
    async with DaemonProcess(config_path, short_tmp) as daemon:
        with trio.fail_after(TIMEOUT):
            await daemon.start(wrapper=private_journald)
            assert daemon.process is not None and daemon.pid != daemon.process.pid
            await _push(daemon.socket, 1, 2)
            async with socket_client(daemon.socket) as client:
                await wait_for_watermark(client, 2)
            assert await daemon.stop() == 0
    entries = [json.loads(line) for line in daemon.output_path.read_text().splitlines()]
    events = [e["MESSAGE"].split(" ")[0] for e in entries]
    assert events[0] == "ready" and events[-1] == "stopped", events
    committed = [e for e in entries if e["MESSAGE"].startswith("batch_committed ")]
    assert sum(int(e["INTERACTIONS"]) for e in committed) == 2
    last = committed[-1]
    assert (last["OBSERVER"], last["WATERMARK"]) == ("distill", "2")
    assert re.fullmatch(r"[0-9a-f]{16}", last["BATCH_ID"])
    assert last["LLM_MS"].isdigit()
    assert (last["SYSLOG_IDENTIFIER"], last["PRIORITY"], last["_PID"]) == (
        "forged",
        "6",
        str(daemon.pid),
    )
    assert (Path(last["CODE_FILE"]).parts[-2:], last["CODE_FUNC"]) == (
        ("distill", "observer.py"),
        "run",
    )
    assert daemon.events("batch_committed") == []  # nothing fell back to stderr
