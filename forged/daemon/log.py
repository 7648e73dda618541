"""Logging setup: structlog rendering to journald native fields, JSON lines, or a terminal."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import msgspec
import structlog
from structlog.processors import CallsiteParameter
from structlog.typing import EventDict, Processor, WrappedLogger

from forged.daemon import systemd

__all__ = ["FORMATS", "LEVELS", "PRIORITIES", "SYSLOG_IDENTIFIER", "configure", "reopen"]

FORMATS = ("auto", "console", "json", "journal")  # accepted values of `fmt`
LEVELS = {  # accepted values of `level`, as stdlib numbers for structlog's level filter
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
PRIORITIES = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2}  # syslog(3) levels
SYSLOG_IDENTIFIER = "forged"  # what `journalctl -t forged` matches
_CALLSITE = {  # structlog callsite keys and the journald fields they become
    "pathname": "CODE_FILE",
    "lineno": "CODE_LINE",
    "func_name": "CODE_FUNC",
}
_OWN_FIELDS = frozenset(  # fields the renderer sets itself; an event key must not shadow them
    {"MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "TRACEBACK", *_CALLSITE.values()}
)
_SHADOW_PREFIX = "FIELD_"  # `message=` becomes FIELD_MESSAGE instead of a second MESSAGE
_PLAIN = re.compile(r'[^\s"=]+')  # values shown unquoted in MESSAGE's key=value list
_CONTROL = (  # control and bidi characters: raw, they forge lines or reorder what a reader sees
    "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
)
_UNSAFE = re.compile(f"[\t\n{_CONTROL}]")  # escaped in every journal value
_UNSAFE_IN_TRACEBACK = re.compile(f"[{_CONTROL}]")  # a traceback keeps its lines and indents
_JSON = msgspec.json.Encoder(enc_hook=str)  # str() whatever JSON cannot hold

_sender: systemd.JournalSender | None = None  # the journal socket, kept for reopen()


def _text(value: Any) -> str:
    """A field value as text: strings as they are, JSON for numbers, booleans and containers."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool | int | float | list | tuple | dict):
        return _JSON.encode(value).decode()
    return str(value)


def _escaped(text: str, unsafe: re.Pattern[str] = _UNSAFE) -> str:
    """`text` with unsafe characters written as Python escapes (`\\x1b`, `\\u202e`): visible, inert."""
    return unsafe.sub(lambda m: ascii(m[0])[1:-1], text)


def _shown(key: str, value: str) -> str:
    """`key=value` for MESSAGE, the value JSON-quoted when it has spaces, quotes or `=`."""
    return f"{key}={value}" if _PLAIN.fullmatch(value) else f"{key}={_JSON.encode(value).decode()}"


def _field_name(key: str) -> str:
    name = systemd.journal_field(key)
    return _SHADOW_PREFIX + name if name in _OWN_FIELDS else name


def _journal_fields(event_dict: EventDict) -> list[tuple[str, str]]:
    """One journal entry: MESSAGE, PRIORITY, identifier, code location, then every event key."""
    rest = dict(event_dict)
    event = _escaped(_text(rest.pop("event", "")))
    priority = PRIORITIES.get(rest.pop("level", "info"), PRIORITIES["info"])
    exception = rest.pop("exception", None)
    traceback = _escaped(_text(exception), _UNSAFE_IN_TRACEBACK) if exception else ""
    code = [
        (field, _escaped(_text(rest.pop(key)))) for key, field in _CALLSITE.items() if key in rest
    ]
    pairs = [(key, _escaped(_text(value))) for key, value in rest.items()]
    message = " ".join([event, *(_shown(_escaped(key), value) for key, value in pairs)])
    fields = [
        ("MESSAGE", f"{message}\n{traceback}" if traceback else message),
        ("PRIORITY", str(priority)),
        ("SYSLOG_IDENTIFIER", SYSLOG_IDENTIFIER),
        *code,
        *((_field_name(key), value) for key, value in pairs),
    ]
    if traceback:
        fields.append(("TRACEBACK", traceback))
    return fields


def _render_journal(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> Any:
    """Final processor: hand the fields, and the event for the fallback, to `_JournalLogger`."""
    return (_journal_fields(event_dict), event_dict), {}


def _render_json(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> str:
    return _JSON.encode(event_dict).decode()


class _JournalLogger:
    """Send each entry to journald; write it as a JSON line on `fallback` if that fails."""

    def __init__(self, sender: systemd.JournalSender, fallback: TextIO) -> None:
        self._sender = sender
        self._fallback = fallback

    def msg(self, fields: list[tuple[str, str]], event_dict: MutableMapping[str, Any]) -> None:
        try:
            self._sender.send(fields)
        except OSError:  # journald gone or restarting: keep the entry on stderr instead
            self._fallback.write(_JSON.encode(event_dict).decode() + "\n")
            self._fallback.flush()

    debug = info = warning = warn = error = critical = exception = fatal = log = msg


def _resolve(fmt: str, stream: TextIO) -> str:
    if fmt != "auto":
        return fmt
    if systemd.journal_stream_connected():
        return "journal"
    return "console" if stream.isatty() else "json"


def _processors(fmt: str) -> list[Processor]:
    """The processor chain of one format, built once per `configure`."""
    head: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
    ]
    if fmt == "console":
        return [*head, structlog.processors.TimeStamper(fmt="iso"), structlog.dev.ConsoleRenderer()]
    if fmt == "json":
        stamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
        return [*head, stamp, structlog.processors.format_exc_info, _render_json]
    callsite = [CallsiteParameter.PATHNAME, CallsiteParameter.LINENO, CallsiteParameter.FUNC_NAME]
    return [
        *head,
        structlog.processors.CallsiteParameterAdder(callsite),
        structlog.processors.format_exc_info,
        _render_journal,
    ]


def reopen() -> None:
    """On SIGHUP: drop the journal socket so the next entry opens a fresh one.

    stderr is inherited and never reopened; there is no log file to rotate.
    """
    if _sender is not None:
        _sender.close()


def configure(
    fmt: str = "auto",
    level: str = "info",
    *,
    cache_loggers: bool = True,
    journal_socket: str = systemd.JOURNAL_SOCKET,
) -> None:
    """Set up structlog once at start; calling it again replaces the setup.

    `fmt` "auto" picks journal when stderr is the journal stream, console on a terminal, JSON
    lines otherwise. Loggers cache their configuration on first use; tests that reconfigure
    should fetch loggers afterwards or pass `cache_loggers=False`.
    """
    global _sender
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    stream = sys.stderr
    fmt = _resolve(fmt, stream)
    reopen()
    factory: Any
    if fmt == "journal":
        _sender = systemd.JournalSender(journal_socket)
        logger = _JournalLogger(_sender, stream)
        factory = lambda *_args: logger  # noqa: E731 (one shared logger owns the socket)
    else:
        _sender = None
        factory = structlog.WriteLoggerFactory(file=stream)
    structlog.configure(
        processors=_processors(fmt),
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=factory,
        cache_logger_on_first_use=cache_loggers,
    )
