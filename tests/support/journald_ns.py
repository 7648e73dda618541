"""Run a command next to a private systemd-journald and print what it logged as JSON lines.

Usage, as root: unshare --mount --propagation private python journald_ns.py CMD [ARG...]

Inside the fresh mount namespace, tmpfs goes over journald's directories so the real system
journal is neither read nor written; journald is started with a notify socket and awaited until
READY=1, CMD runs, journald is told to sync, and `journalctl -o json` of the entries tagged
`forged` goes to stdout. The exit status is CMD's.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile

JOURNALD = "/lib/systemd/systemd-journald"  # Debian's path to the daemon
PRIVATE_DIRS = ("/run/systemd", "/run/log", "/var/log/journal")  # hidden under tmpfs
READY_TIMEOUT = 10.0  # seconds journald may take to report READY=1
IDENTIFIER = "forged"  # entries of this SYSLOG_IDENTIFIER are printed


def namespaces_unavailable() -> str | None:
    """Why a private mount namespace with journald cannot be had here, or None."""
    if os.geteuid() != 0:
        return "mounting tmpfs over /run/systemd needs root"
    if shutil.which("unshare") is None or not os.access(JOURNALD, os.X_OK):
        return f"unshare or {JOURNALD} is not installed"
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, check=False)
    return f"unshare --mount fails: {probe.stderr.decode().strip()}" if probe.returncode else None


def _hide_system_journal() -> None:
    for path in PRIVATE_DIRS:
        if os.path.isdir(path):
            subprocess.run(["mount", "-t", "tmpfs", "tmpfs", path], check=True)


def _start_journald(notify_dir: str) -> subprocess.Popen[bytes]:
    """Start journald and return once it has sent READY=1."""
    address = os.path.join(notify_dir, "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(address)
        notify.settimeout(READY_TIMEOUT)
        env = {**os.environ, "NOTIFY_SOCKET": address}
        journald = subprocess.Popen([JOURNALD], env=env)
        try:
            while b"READY=1" not in notify.recv(4096).split(b"\n"):
                pass
        except BaseException:
            journald.kill()
            journald.wait()
            raise
    return journald


def main(argv: list[str]) -> int:
    _hide_system_journal()
    with tempfile.TemporaryDirectory() as notify_dir:
        journald = _start_journald(notify_dir)
    try:
        status = subprocess.run(argv, check=False).returncode
        subprocess.run(["journalctl", "--sync"], check=True)
        query = [
            "journalctl",
            "-o",
            "json",
            "--all",
            "--no-pager",
            f"SYSLOG_IDENTIFIER={IDENTIFIER}",
        ]
        subprocess.run(query, check=True)
    finally:
        journald.terminate()
        journald.wait(timeout=READY_TIMEOUT)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
