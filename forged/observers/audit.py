"""The audit trail: every stored interaction appended to a JSON-lines file, rotated by size.

Enable it with a config table:

    [observers.audit]
    class = "forged.observers.audit:AuditLog"
    path = "/var/lib/forged/audit.jsonl"

Each line is one interaction as the log holds it (`seq`, `scope`, `session`, `timestamp`,
`tokens`, `messages`), already scrubbed of secrets. Lines are flushed to disk before the
watermark moves; after a crash the torn last line is cut off and what the file already holds
is not written twice, so every seq appears exactly once, in order.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import msgspec
import trio

from forged.plugin_api import Batcher, Feed, ObserverContext, Progress

__all__ = ["BATCH", "FILE_MODE", "TAIL_CHUNK", "AuditConfig", "AuditFile", "AuditLog"]

FILE_MODE = 0o600  # the trail holds conversations: memory, for forged's user alone
BATCH = 256  # interactions written (and synced) together at most
TAIL_CHUNK = 64 * 1024  # bytes read at a time when looking for the last line
_ENCODE = msgspec.json.Encoder()


class AuditConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """`[observers.audit]` settings."""

    path: str  # the current file; rotated ones beside it as PATH.1 (newest) ... PATH.KEEP
    max_bytes: Annotated[int, msgspec.Meta(ge=4096)] = 64 * 1024 * 1024  # rotate past this size
    keep: Annotated[int, msgspec.Meta(ge=1)] = 10  # rotated files kept; older ones are deleted


class _Seq(msgspec.Struct):
    seq: int


def _last_line(fd: int) -> bytes | None:
    """The last complete line of the file; a torn line after it (a crash mid-write) is cut off."""
    size = os.fstat(fd).st_size
    buf, pos = b"", size
    while pos > 0 and buf.count(b"\n") < 2:
        step = min(TAIL_CHUNK, pos)
        pos -= step
        buf = os.pread(fd, step, pos) + buf
    end = buf.rfind(b"\n") + 1
    if pos + end < size:
        os.ftruncate(fd, pos + end)
    return buf[:end].split(b"\n")[-2] if end else None


class AuditFile:
    """The trail on disk: append-only, synced per batch, rotated by size. Blocking calls."""

    def __init__(self, config: AuditConfig) -> None:
        self.path = Path(config.path)
        self.max_bytes = config.max_bytes
        self.keep = config.keep
        self._fd = -1
        self._size = 0

    def _open(self) -> None:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC  # read: the last line
        self._fd = os.open(self.path, flags, FILE_MODE)
        os.fchmod(self._fd, FILE_MODE)  # a file made earlier with a looser mode is tightened
        self._size = os.fstat(self._fd).st_size

    def open(self) -> int:
        """Open (or create) the current file; the last seq the trail holds, 0 if none."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._open()
        line = _last_line(self._fd)
        self._size = os.fstat(self._fd).st_size
        rotated = self.path.with_name(self.path.name + ".1")
        if line is None and rotated.exists():  # rotated, then stopped before the next write
            with open(rotated, "rb+") as previous:
                line = _last_line(previous.fileno())
        return 0 if line is None else msgspec.json.decode(line, type=_Seq).seq

    def _rotate(self) -> None:
        os.close(self._fd)
        name = self.path.name
        for n in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{name}.{n}")
            if older.exists():
                older.rename(self.path.with_name(f"{name}.{n + 1}"))
        self.path.rename(self.path.with_name(f"{name}.1"))
        self._open()

    def append(self, lines: list[bytes]) -> None:
        """Write the lines, rotating before one would pass `max_bytes`; then sync them to disk."""
        for line in lines:
            if self._size and self._size + len(line) > self.max_bytes:
                os.fsync(self._fd)
                self._rotate()
            os.write(self._fd, line)
            self._size += len(line)
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class AuditLog:
    """Appends every interaction to the trail, then moves its watermark."""

    Config = AuditConfig

    def __init__(self, context: ObserverContext[AuditConfig]) -> None:
        self.name = context.name
        self.config = context.config
        self.log = context.log
        trail = AuditFile(self.config)  # a path it cannot write stops forged at start, in one
        trail.open()  # line, rather than failing and restarting for ever
        trail.close()

    async def run(self, interactions: Feed, progress: Progress) -> None:
        trail = AuditFile(self.config)
        written = await trio.to_thread.run_sync(trail.open)
        self.log.info("audit_opened", path=str(trail.path), last_seq=written)
        batcher = Batcher(interactions, max_items=BATCH)
        try:
            while True:
                batch = await batcher.next()
                lines = [_ENCODE.encode(i) + b"\n" for i in batch if i.seq > written]
                if lines:
                    await trio.to_thread.run_sync(trail.append, lines)
                written = max(written, batch[-1].seq)
                await progress.commit(batch[-1].seq)
        finally:
            trail.close()
