"""The exceptions forged raises, one tree under `ForgedError`.

ForgedError
├── ConfigError          the configuration file or environment is wrong
├── InvalidRequest       a client sent something the API cannot accept (carries a code)
│   └── QueryTimeout     a recall query ran past its time budget and was stopped
├── StoreError           the store (SQLite or PostgreSQL) failed
│   └── StorageFull      the disk (or the database size limit) is full
├── DistillError         a distiller could not turn a transcript into memory
│   ├── LLMUnavailable   transient: connect, timeout, 429, 5xx, model loading; retry forever
│   ├── ContextOverflow  the transcript does not fit the model's context; split the batch
│   ├── UnsupportedMode  the server rejected the structured-output mode; try the next one
│   ├── InvalidAnswer    the answer was not valid memory; retry, then split
│   └── CheckOverrun     checking a transcript or an answer ran past its deadline; split
├── ObserverError        an observer plugin broke its contract (its run returned)
├── BudgetSpent          the hourly budget of consolidation's LLM calls is used up
├── BundledLLMError      the bundled local model could not be started
├── AlreadyRunning       another daemon is serving on the configured socket
├── BackupError          a backup could not be taken, checked or restored
└── ClientError          a client of the daemon could not get what it asked for
    ├── Unreachable      no daemon answers on the socket (not running, wrong path, timed out)
    └── ApiError         the daemon answered with an error (carries status, code, message)
        ├── BadRequest   4xx: the request is wrong; sending it again will not help
        └── Unavailable  5xx: the daemon cannot serve it now; `retry_after` says when to retry
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from forged.models import Usage

__all__ = [
    "AlreadyRunning",
    "ApiError",
    "BackupError",
    "BadRequest",
    "BudgetSpent",
    "BundledLLMError",
    "CheckOverrun",
    "ClientError",
    "ConfigError",
    "ContextOverflow",
    "DistillError",
    "ForgedError",
    "InvalidAnswer",
    "InvalidRequest",
    "LLMUnavailable",
    "ObserverError",
    "StorageFull",
    "StoreError",
    "Unavailable",
    "Unreachable",
    "UnsupportedMode",
    "leaves",
    "located",
]

_AT = re.compile(r"^(?P<problem>.*) - at `(?P<at>[^`]*)`$")  # how msgspec says where a value is


class ForgedError(Exception):
    """Base class of every error forged raises on purpose."""


class ConfigError(ForgedError):
    """The configuration file or environment holds an unknown key, a wrong type or a bad value."""


class InvalidRequest(ForgedError):
    """A request the API rejects: `code` says why (`invalid_body`, `backlog_full`, ...), and the
    HTTP layer answers it with the status that code stands for."""

    def __init__(self, code: str, message: str, *, retry_after: int | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after = retry_after


class QueryTimeout(InvalidRequest):
    """A recall query ran past `recall.query_timeout_ms` and was stopped: a 503 for its client."""

    def __init__(self, budget: float) -> None:
        super().__init__(
            "query_timeout",
            f"the query ran past its time budget"
            f" ({budget * 1000:.0f} ms, recall.query_timeout_ms) and was stopped;"
            " ask with fewer or rarer words",
        )


class StoreError(ForgedError):
    """SQLite reported an error the store cannot handle."""


class StorageFull(StoreError):
    """SQLite reported the disk or the database full; nothing of the transaction was kept."""


class DistillError(ForgedError):
    """A distiller could not turn a transcript into memory."""

    def __init__(self, message: str, *, raw: str | None = None, usage: Usage | None = None):
        super().__init__(message)
        self.raw = raw
        self.usage = usage  # what the failed call(s) cost, when the model did answer


class LLMUnavailable(DistillError):
    """The LLM could not be reached or answered with a transient error; retry later."""


class ContextOverflow(DistillError):
    """The transcript does not fit the model's context; a smaller batch may."""


class UnsupportedMode(DistillError):
    """The server rejected the structured-output mode of the request."""


class InvalidAnswer(DistillError):
    """The answer was not valid memory (not JSON, wrong shape, truncated)."""


class CheckOverrun(DistillError):
    """CPU work on a batch's text (rendering, picking, grounding) ran past its deadline and was
    stopped; a smaller batch may pass, a single interaction is given up on."""


class ObserverError(ForgedError):
    """An observer plugin broke its contract: its `run` returned instead of running on."""


class BudgetSpent(ForgedError):
    """The hourly call budget is used up; `retry_after` seconds until a call is free."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"the hourly budget of LLM calls is spent for {retry_after:.0f} s")
        self.retry_after = retry_after


class BundledLLMError(ForgedError):
    """The bundled local LLM server could not be started."""


class AlreadyRunning(ForgedError):
    """Another daemon answers on the configured socket; a second one must not take it over."""


class BackupError(ForgedError):
    """A backup could not be taken, did not pass its checks, or could not be restored."""


class ClientError(ForgedError):
    """A client of the daemon (the library, the command line) could not get what it asked for."""


class Unreachable(ClientError):
    """No daemon answers on the socket: not running, a wrong path, or no answer in time."""


class ApiError(ClientError):
    """The daemon answered with an error: `status`, and its `code` and `message`."""

    def __init__(self, status: int, code: str, message: str, *, retry_after: int | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


class BadRequest(ApiError):
    """A 4xx answer: the request is wrong (bad body or parameter, unknown path); do not resend."""


class Unavailable(ApiError):
    """A 5xx answer: backlog full, shutting down, disk full, LLM unreachable; retry later."""


def located(message: str) -> tuple[str, str | None]:
    """A msgspec error message split into the problem and where it is (`$.server`), if it says."""
    if m := _AT.match(message):
        return m["problem"], m["at"]
    return message, None


def leaves(error: BaseException) -> list[BaseException]:
    """The errors inside nested exception groups (trio wraps what a nursery raises), in order."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]
