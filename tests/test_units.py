"""Tests for the shipped systemd units, judged by systemd's own tools."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from forged.config import ServerConfig
from forged.daemon.runner import FD_RESERVE

UNITS = Path(__file__).resolve().parents[1] / "systemd"
SERVICE, SOCKET, SYSUSERS = (
    UNITS / "forged.service",
    UNITS / "forged.socket",
    UNITS / "forged.sysusers",
)
BACKUP_SERVICE, BACKUP_TIMER = UNITS / "forged-backup.service", UNITS / "forged-backup.timer"
ALL_UNITS = (SERVICE, SOCKET, BACKUP_SERVICE, BACKUP_TIMER)
MAX_EXPOSURE = 1.5  # the hardening target of DESIGN.md
HOST_UNITS = Path("/usr/lib/systemd/system")  # targets our units depend on (sysinit.target, ...)
TIMEOUT = 60.0  # seconds a systemd tool may take
_EXPOSURE = re.compile(r"Overall exposure level for \S+: (\d+\.\d+)")

pytestmark = [
    pytest.mark.integration,  # systemd-analyze and friends run as child processes
    pytest.mark.skipif(
        shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
    ),
]


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=TIMEOUT)


def _exposure(unit: Path) -> float:
    done = _run("systemd-analyze", "security", "--offline=yes", str(unit))
    found = _EXPOSURE.search(done.stdout)
    assert found, done.stdout + done.stderr
    return float(found.group(1))


def _settings(unit: Path) -> dict[str, list[str]]:
    """KEY=value lines of a unit file; a key may repeat."""
    settings: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith(("#", ";")):
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def _install_root(root: Path) -> None:
    """A system tree holding the units unchanged and executables where Exec*= lines point."""
    (root / "usr/lib/systemd").mkdir(parents=True)
    shutil.copytree(HOST_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    unit_dir = root / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    for unit in ALL_UNITS:
        shutil.copyfile(unit, unit_dir / unit.name)
    for service in (_settings(SERVICE), _settings(BACKUP_SERVICE)):
        for key in ("ExecStart", "ExecReload"):
            for line in service.get(key, []):
                binary = root / line.split()[0].lstrip("/")
                binary.parent.mkdir(parents=True, exist_ok=True)
                binary.write_text("#!/bin/sh\n")
                binary.chmod(0o755)


@pytest.mark.parametrize("unit", [SERVICE, BACKUP_SERVICE], ids=lambda u: u.name)
def test_service_exposure_is_at_most_1_5(unit: Path) -> None:
    """systemd-analyze security rates each hardened service 1.5 or lower."""
    exposure = _exposure(unit)
    print(f"{unit.name} exposure: {exposure}")
    assert exposure <= MAX_EXPOSURE


def test_exposure_parsing_sees_an_unhardened_unit(tmp_path: Path) -> None:
    """The same measurement rates a bare service far above the target, so the check can fail."""
    bare = tmp_path / "bare.service"
    bare.write_text("[Service]\nExecStart=/bin/true\n")
    assert _exposure(bare) > 5.0


@pytest.mark.skipif(not HOST_UNITS.is_dir(), reason=f"{HOST_UNITS} holds no system units")
def test_units_verify_clean(tmp_path: Path) -> None:
    """systemd-analyze verify finds nothing to say about the units, ExecStart included.

    verify checks that ExecStart's binary exists. Rather than edit the unit, it runs with
    --root on a tree that holds the units byte for byte and a stand-in at the install path.
    """
    _install_root(tmp_path)
    done = _run("systemd-analyze", "verify", f"--root={tmp_path}", *(u.name for u in ALL_UNITS))
    assert [line for line in done.stderr.splitlines() if "forged" in line] == []
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(not HOST_UNITS.is_dir(), reason=f"{HOST_UNITS} holds no system units")
def test_verify_reports_a_broken_unit(tmp_path: Path) -> None:
    """The same verify setup complains about an unknown key, so a clean result means something."""
    _install_root(tmp_path)
    unit = tmp_path / "etc/systemd/system" / SERVICE.name
    unit.write_text(unit.read_text().replace("[Service]\n", "[Service]\nWatchdogSecs=1\n"))
    done = _run("systemd-analyze", "verify", f"--root={tmp_path}", SERVICE.name)
    assert "Unknown key 'WatchdogSecs'" in done.stderr


def test_socket_hands_the_api_socket_to_the_service() -> None:
    """The socket unit listens where the daemon expects and names the fd `api`."""
    socket = _settings(SOCKET)
    assert socket["ListenStream"] == ["/run/forged/forged.sock"]
    assert socket["FileDescriptorName"] == ["api"]
    assert socket["SocketMode"] == ["0660"]
    assert socket["Service"] == ["forged.service"]
    service = _settings(SERVICE)
    assert service["Type"] == ["notify"]
    assert service["RuntimeDirectoryPreserve"] == ["yes"]  # the socket file outlives a stop


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None, reason="systemd-sysusers missing")
def test_sysusers_creates_the_socket_group(tmp_path: Path) -> None:
    """systemd-sysusers makes the user and the group the socket unit grants access to."""
    (tmp_path / "etc").mkdir()
    done = _run("systemd-sysusers", f"--root={tmp_path}", str(SYSUSERS))
    assert done.returncode == 0, done.stderr
    group = _settings(SOCKET)["SocketGroup"][0]
    groups = (tmp_path / "etc/group").read_text().splitlines()
    users = (tmp_path / "etc/passwd").read_text().splitlines()
    assert any(line.startswith(f"{group}:") for line in groups)
    assert any(line.startswith(f"{_settings(SERVICE)['User'][0]}:") for line in users)


def test_socket_group_survives_the_runtime_directory_chown() -> None:
    """systemd chowns RuntimeDirectory= to User:Group on start; the socket must keep its group."""
    socket, service = _settings(SOCKET), _settings(SERVICE)
    assert socket["SocketGroup"] == service["Group"]
    assert socket["ListenStream"][0].startswith(f"/run/{service['RuntimeDirectory'][0]}/")
    assert socket["SocketMode"] == ["0660"]


def test_service_can_reach_a_loopback_llm() -> None:
    """Hardening leaves loopback IPv4/IPv6 open for Ollama or llama-server, and nothing else."""
    service = _settings(SERVICE)
    assert service["IPAddressDeny"] == ["any"]
    assert service["IPAddressAllow"] == ["localhost"]
    assert {"AF_INET", "AF_INET6"} <= set(service["RestrictAddressFamilies"][0].split())
    assert "PrivateNetwork" not in service  # a private network namespace has no host loopback


def test_backup_runs_as_the_daemons_user_on_its_database() -> None:
    """The nightly backup reads the service's database as its user, with the same config."""
    backup, service = _settings(BACKUP_SERVICE), _settings(SERVICE)
    assert (backup["User"], backup["Group"]) == (service["User"], service["Group"])
    assert service["StateDirectory"][0] in backup["StateDirectory"][0].split()
    assert "forged backup --config /etc/forged/forged.toml" in backup["ExecStart"][0]
    assert _settings(BACKUP_TIMER)["Persistent"] == ["yes"]


def test_bad_config_is_not_restarted_in_a_loop() -> None:
    """forged exits 2 on a bad configuration; systemd must not restart it for that."""
    assert _settings(SERVICE)["RestartPreventExitStatus"] == ["2"]


def test_file_limit_holds_max_connections() -> None:
    """LimitNOFILE= leaves room for `max_connections` clients and forged's own descriptors."""
    (limit,) = _settings(SERVICE)["LimitNOFILE"]
    assert int(limit) >= ServerConfig().max_connections + FD_RESERVE
