"""systemd's protocols spoken without libsystemd: notify, watchdog, socket activation, journal.

These functions read systemd's protocol variables (`NOTIFY_SOCKET`, `WATCHDOG_USEC`, `LISTEN_FDS`,
`JOURNAL_STREAM`) from the environment themselves: they are handed over by the service manager,
not configuration, so they stay out of `cli/`.
"""

from __future__ import annotations

import array
import errno
import fcntl
import functools
import os
import re
import socket
import struct
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

__all__ = [
    "JOURNAL_FIELD_MAX",
    "JOURNAL_SOCKET",
    "MEMFD_SEALS",
    "SD_LISTEN_FDS_START",
    "UNKNOWN_FD_NAME",
    "JournalSender",
    "ListenSocket",
    "close_notify",
    "journal_field",
    "journal_stream_connected",
    "listen_fds",
    "notify",
    "watchdog_interval",
]

SD_LISTEN_FDS_START = 3  # the first descriptor passed by socket activation (sd_listen_fds(3))
JOURNAL_SOCKET = "/run/systemd/journal/socket"  # journald's native-protocol datagram socket
MEMFD_SEALS = (  # journald reads a passed memfd only when nobody can change it any more
    fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
)
JOURNAL_FIELD_MAX = 64  # journald drops fields whose names are longer
UNKNOWN_FD_NAME = "unknown"  # what sd_listen_fds_with_names(3) reports when no name was given
_OVERSIZE_ERRNOS = frozenset({errno.EMSGSIZE, errno.ENOBUFS})  # datagram too big for the socket
_NOT_FIELD_CHAR = re.compile(r"[^A-Z0-9_]")  # journald field names are [A-Z0-9_] only


class ListenSocket(NamedTuple):
    """A socket passed by socket activation, with its `FileDescriptorName=`."""

    name: str
    socket: socket.socket


class _Datagram:
    """A Unix datagram socket opened on first use, reused, and closed on request; one sender
    at a time (logging may send from any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None

    @contextmanager
    def held(self) -> Iterator[socket.socket]:
        """The socket, opened if need be, for the block's sends alone."""
        with self._lock:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            yield self._sock

    def close(self) -> None:
        """Close the socket; the next send opens a new one."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


class _Notifier(_Datagram):
    """The datagram socket to `$NOTIFY_SOCKET`."""

    def send(self, address: str, payload: bytes) -> bool:
        if address.startswith("@"):  # abstract namespace: a leading NUL instead of a path
            address = "\0" + address[1:]
        elif not address.startswith("/"):
            return False  # vsock: and other transports are not spoken here
        with self.held() as sock:
            try:  # never block the event loop on a receiver that is slow to read
                sock.sendto(payload, socket.MSG_DONTWAIT, address)
            except OSError:
                return False
        return True


_notifier = _Notifier()


def notify(*assignments: str) -> bool:
    """Send `READY=1`, `STATUS=...`, `WATCHDOG=1`, `STOPPING=1`... as one sd_notify datagram.

    Returns False when not started by systemd (no `$NOTIFY_SOCKET`) or when the send fails or
    would block (the receiver's queue is full); a notification is advisory, so it never raises
    or waits for those. Cheap enough to call every second.
    """
    for assignment in assignments:
        if "=" not in assignment or "\n" in assignment:
            raise ValueError(f"a notify assignment is one KEY=value line, got {assignment!r}")
    address = os.environ.get("NOTIFY_SOCKET")
    if not address or not assignments:
        return False
    return _notifier.send(address, "\n".join(assignments).encode())


def close_notify() -> None:
    """Close the notify socket (a later `notify` opens it again); the daemon calls it on exit."""
    _notifier.close()


def watchdog_interval() -> float | None:
    """Seconds between `WATCHDOG=1` pings (half of `WatchdogSec=`), or None when not watched."""
    usec = os.environ.get("WATCHDOG_USEC", "")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid is not None and pid != str(os.getpid()):
        return None  # meant for another process (our parent, say)
    return int(usec) / 2 / 1_000_000


def listen_fds() -> list[ListenSocket]:
    """Take the sockets systemd passed by socket activation (fds 3, 4, ...), in order.

    Empty when there are none or they were meant for another process (`LISTEN_PID`). The
    variables are removed either way so that children never mistake the sockets for theirs, and
    the descriptors are made close-on-exec. Call it once: the second call finds nothing.
    """
    pid = os.environ.pop("LISTEN_PID", "")
    count = os.environ.pop("LISTEN_FDS", "")
    names = os.environ.pop("LISTEN_FDNAMES", "").split(":")
    if pid != str(os.getpid()) or not count.isdigit():
        return []
    fds = range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + int(count))
    if len(names) != len(fds):
        names = [UNKNOWN_FD_NAME] * len(fds)
    sockets = []
    for fd, name in zip(fds, names, strict=True):
        os.set_inheritable(fd, False)
        sockets.append(ListenSocket(name, socket.socket(fileno=fd)))
    return sockets


def journal_stream_connected() -> bool:
    """Whether stderr is the journal stream systemd set up (`$JOURNAL_STREAM` is "dev:inode")."""
    dev, _, inode = os.environ.get("JOURNAL_STREAM", "").partition(":")
    if not (dev.isdigit() and inode.isdigit()):
        return False
    try:
        stat = os.fstat(2)
    except OSError:
        return False
    return (stat.st_dev, stat.st_ino) == (int(dev), int(inode))


@functools.lru_cache(maxsize=1024)
def journal_field(key: str) -> str:
    """A valid journald field name for `key`: upper case, `[A-Z0-9_]`, no leading `_` or digit."""
    name = _NOT_FIELD_CHAR.sub("_", key.upper()).lstrip("_")
    if not name or name[0].isdigit():
        name = "F_" + name  # `_` would make it a trusted field, a digit is not allowed
    return name[:JOURNAL_FIELD_MAX]


def _encode_entry(fields: Iterable[tuple[str, str | bytes]]) -> bytes:
    """Serialize fields in journald's native format; multi-line values get the binary form."""
    parts = []
    for name, value in fields:
        data = value.encode() if isinstance(value, str) else value
        key = name.encode()
        if b"\n" in data:  # KEY\n, little-endian 64-bit length, raw bytes, \n
            parts.append(key + b"\n" + struct.pack("<Q", len(data)) + data + b"\n")
        else:
            parts.append(key + b"=" + data + b"\n")
    return b"".join(parts)


class JournalSender(_Datagram):
    """Send entries to journald over its native datagram protocol, one datagram per entry."""

    def __init__(self, path: str = JOURNAL_SOCKET) -> None:
        super().__init__()
        self.path = path

    def send(self, fields: Iterable[tuple[str, str | bytes]]) -> None:
        """Send one entry; raises OSError when journald cannot be reached.

        Field names must already be valid (see `journal_field`). An entry too large for one
        datagram travels as a sealed memfd instead, as sd_journal_send(3) does.
        """
        payload = _encode_entry(fields)
        with self.held() as sock:
            try:
                sock.sendto(payload, self.path)
            except OSError as exc:
                if exc.errno not in _OVERSIZE_ERRNOS:
                    raise
                self._send_memfd(sock, payload)

    def _send_memfd(self, sock: socket.socket, payload: bytes) -> None:
        fd = os.memfd_create("forged-journal", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            with open(fd, "wb", closefd=False) as memfd:
                memfd.write(payload)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, MEMFD_SEALS)
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
            sock.sendmsg([], rights, 0, self.path)  # an empty datagram carrying only the fd
        finally:
            os.close(fd)
