"""The store seam: what the daemon needs of the database that holds the memory, and how it opens.

SQLite (`store.sqlite.Store`) is the embedded default; PostgreSQL (`store.postgres.PostgresStore`) is one memory
shared by daemons on many hosts. Everything that differs between them (SQL dialect, transactions,
migrations, full-text search, how observers share work) lives behind these methods and in
`recall`'s choice of queries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

from forged.config import StoreConfig
from forged.errors import StoreError
from forged.models import (
    ConsolidationChange,
    ConsolidationRun,
    Correction,
    DeadLetterInfo,
    Erased,
    FactAudit,
    NewFact,
    ObserverStatus,
    StoredInteraction,
)
from forged.store.readers import ReadWaits
from forged.store.records import (
    BatchOutcome,
    Forgotten,
    NewInteraction,
    OpenDeadLetter,
    VectorBatch,
)

__all__ = ["Backend", "check_store", "open_store"]

T = TypeVar("T")


class Backend(Protocol):
    """A store: the log, distilled results, watermarks; every write is one of its methods."""

    backend: str  # "sqlite" or "postgresql", shown by /v1/status
    path: str  # the database file or URL
    poll_interval: float  # seconds a feeder waits for appends it was not told of
    schema_version: int
    last_seq: int
    count: int

    def close(self) -> None: ...

    async def size_bytes(self) -> int:
        """The bytes the database takes on disk (SQLite's file and its WAL; PostgreSQL's)."""
        ...

    def read_waits(self) -> ReadWaits:
        """Reads on the shared reader connections since the start, and their waits."""
        ...

    async def read(
        self,
        fn: Callable[..., T],
        *args: Any,
        scope: str | None = None,
        budget: float | None = None,
    ) -> T:
        """`fn(connection, *args)` in a thread, on a connection free for `scope` (no scope takes
        them all), stopped with QueryTimeout after `budget` seconds."""
        ...

    def lease(
        self, observer: str, follow: Callable[[int], None]
    ) -> AbstractAsyncContextManager[None]: ...

    async def append(self, requests: list[list[NewInteraction]]) -> list[int]: ...

    async def read_log(self, after: int, limit: int) -> list[StoredInteraction]:
        """Up to `limit` interactions after seq `after`, in order, holding at most
        common.MAX_READ_BYTES of messages past the first."""
        ...

    async def refresh_totals(self) -> dict[str, int]: ...

    async def commit_batch(self, observer: str, outcome: BatchOutcome) -> BatchOutcome: ...

    async def commit_consolidation(
        self, observer: str, run: ConsolidationRun
    ) -> list[ConsolidationChange]: ...

    async def set_watermark(self, observer: str, seq: int) -> None: ...

    async def commit_vectors(self, observer: str, batch: VectorBatch) -> None: ...

    async def forget(self, scope: str, observers: Iterable[str] = ()) -> Forgotten: ...

    async def delete(
        self, item: str, item_id: int, within: str | None = ...
    ) -> tuple[str, Erased]: ...

    async def correct_fact(
        self, fact_id: int, correction: Correction, within: str | None = ...
    ) -> FactAudit: ...

    async def add_fact(self, new: NewFact, at: str | None) -> FactAudit: ...

    async def pin_fact(self, fact_id: int, pinned: bool, within: str | None = ...) -> FactAudit: ...

    async def watermark(self, observer: str) -> int: ...

    async def observer_totals(self, observer: str) -> ObserverStatus: ...

    async def known_mode(self, endpoint: str) -> str | None: ...

    async def remember_mode(self, endpoint: str, mode: str) -> None: ...

    async def open_dead_letters(
        self, observer: str, first_seq: int = ..., last_seq: int = ...
    ) -> list[OpenDeadLetter]: ...

    async def list_dead_letters(
        self, observer: str, first_seq: int = ..., last_seq: int = ...
    ) -> list[DeadLetterInfo]: ...


def open_store(config: StoreConfig) -> Backend:
    """The store the config selects, open and migrated (blocking: call it in a thread)."""
    if config.backend == "postgresql":
        from forged.store.postgres import (
            PostgresStore,  # the driver loads only for those who use it
        )

        return PostgresStore(config)
    from forged.store.sqlite import Store

    return Store(config.path, config.busy_timeout_ms, config.readers)


def check_store(config: StoreConfig) -> str:
    """One line on the configured database: reachable, and at which schema version.

    Raises StoreError when it cannot be reached or is newer than this forged.
    """
    if config.backend == "postgresql":
        from forged.store.postgres import schema_version
        from forged.store.postgres_schema import MIGRATIONS as known

        where, version = config.url, schema_version(config)
    else:
        from forged.store.sqlite import file_schema_version
        from forged.store.sqlite_schema import MIGRATIONS as known

        where, version = config.path, file_schema_version(config.path)
    if version > len(known):
        raise StoreError(
            f"the database at {where} is at schema version {version}, newer than"
            f" this forged knows ({len(known)}); upgrade forged"
        )
    todo = "" if version == len(known) else f" (migrated to {len(known)} at start)"
    return f"store: {config.backend} at {where}, schema version {version}{todo}"
