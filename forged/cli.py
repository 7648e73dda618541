"""The `forged` command: run the daemon, or talk to it over its Unix socket."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

import httpx
import msgspec

from forged import __version__
from forged.backup import restore_backup, take_backup
from forged.config import DEFAULT_CONFIG_PATH, Config, load_config, render_toml
from forged.errors import ClientError, ConfigError, ForgedError
from forged.models import FACT_KINDS, RECALL_KINDS

EXIT_CONFIG = 2  # a bad configuration (or usage): systemd should not restart us in a loop
CLIENT_TIMEOUT = 120.0  # seconds a command waits for the daemon's answer


def _config_path(args: argparse.Namespace, env: Mapping[str, str]) -> Path | None:
    if args.config:
        return Path(args.config)
    if env.get("FORGED_CONFIG"):
        return Path(env["FORGED_CONFIG"])
    return DEFAULT_CONFIG_PATH if DEFAULT_CONFIG_PATH.exists() else None


def _config(args: argparse.Namespace) -> Config:
    return load_config(_config_path(args, os.environ), os.environ)


class Client:
    """A small HTTP client of the daemon's socket."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        transport = httpx.HTTPTransport(uds=socket_path)
        self._http = httpx.Client(
            transport=transport, base_url="http://forged", timeout=CLIENT_TIMEOUT
        )

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send a request; return the decoded answer or raise ClientError with the daemon's words."""
        try:
            response = self._http.request(method, path, **kwargs)
        except (httpx.ConnectError, FileNotFoundError) as exc:
            raise ClientError(
                f"cannot reach forged at {self.socket_path} ({exc}); is the daemon running?"
            ) from exc
        except httpx.HTTPError as exc:
            raise ClientError(f"talking to forged at {self.socket_path} failed: {exc}") from exc
        try:
            body = response.json()
        except json.JSONDecodeError:
            body = {"error": {"code": "bad_answer", "message": response.text[:200]}}
        if response.is_error:
            error = body.get("error", {}) if isinstance(body, dict) else {}
            raise ClientError(f"{response.status_code} {error.get('code')}: {error.get('message')}")
        return body


def _client(args: argparse.Namespace) -> Client:
    socket_path = args.socket or os.environ.get("FORGED_SOCKET") or _config(args).server.socket
    return Client(socket_path)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def cmd_serve(args: argparse.Namespace) -> int:
    import trio

    from forged import log
    from forged.daemon import run_daemon

    config = _config(args)
    log.configure(config.log.format, config.log.level)
    trio.run(lambda: run_daemon(config, bundled_llm=args.bundled_llm))
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    from forged.plugins import check_observers  # imports the daemon's modules: only here

    config = _config(args)
    check_observers(config)
    source = _config_path(args, os.environ) or "embedded defaults"
    print(f"# effective configuration (from {source}, with FORGED_* overrides)")
    print(render_toml(config).rstrip())
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    info = take_backup(_config(args).store, Path(args.file))
    print(f"backed up to {args.file}: {info.describe()}")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    database = _config(args).store.path
    info = restore_backup(Path(args.file), database, replace=args.yes)
    print(f"restored {args.file} into {database}: {info.describe()}")
    return 0


def _read_input(file: str) -> bytes:
    if file == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(file).read_bytes()
    except OSError as exc:
        raise ClientError(f"cannot read {file}: {exc.strerror}") from exc


def _content_type(data: bytes, file: str) -> str:
    """JSON when the input parses as one document, NDJSON otherwise (or by file suffix)."""
    if file.endswith((".ndjson", ".jsonl")):
        return "application/x-ndjson"
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError:
        return "application/x-ndjson"
    return "application/json"


def cmd_push(args: argparse.Namespace) -> int:
    data = _read_input(args.file)
    headers = {"content-type": _content_type(data, args.file)}
    _print_json(_client(args).request("POST", "/v1/interactions", content=data, headers=headers))
    return 0


def _format_status(status: dict[str, Any]) -> str:
    state = (
        "shutting down" if status["shutting_down"] else "ready" if status["ready"] else "starting"
    )
    lines = [
        f"forged {status['version']}, {state}, up {status['uptime_s']:.0f} s",
        f"log: {status['log']['count']} interactions, last seq {status['log']['last_seq']}",
    ]
    for o in status["observers"]:
        lines.append(
            f"{o['name']}: {o['state']}, watermark {o['watermark']}, backlog {o['backlog']},"
            f" {o['batches']} batches, {o['llm_calls']} LLM calls"
            f" ({o['prompt_tokens']} prompt + {o['completion_tokens']} completion tokens,"
            f" {o['llm_ms'] / 1000:.1f} s), {o['dead_letters']} dead letters"
        )
        lines.append(f"  last batch: {o['last_batch_at'] or 'none yet'}")
        if o["last_error"]:
            lines.append(f"  last error: {o['last_error']}")
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    status = _client(args).request("GET", "/v1/status")
    if args.json:
        _print_json(status)
    else:
        print(_format_status(status))
    return 0


def _query(**params: Any) -> dict[str, Any]:
    """Query parameters without the options left unset."""
    return {k: v for k, v in params.items() if v is not None}


def _format_result(item: dict[str, Any]) -> str:
    date, text = item["last_at"][:10], " ".join(item["text"].split())
    return f"{item['score']:9.3g}  {item['kind']:<11}  {date}  {text}"


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    """The query options search and context share."""
    return _query(q=args.query, scope=args.scope, kind=args.kind, session=args.session,
                  types=args.types, since=args.since, until=args.until)  # fmt: skip


def cmd_search(args: argparse.Namespace) -> int:
    params = _query(**_filters(args), limit=args.limit)
    results = _client(args).request("GET", "/v1/search", params=params)["results"]
    if args.json:
        _print_json(results)
        return 0
    if not results:
        print("no memory matches", file=sys.stderr)
    for item in results:
        print(_format_result(item))
    return 0


def cmd_context(args: argparse.Namespace) -> int:
    params = _query(**_filters(args), budget_tokens=args.budget)
    answer = _client(args).request("GET", "/v1/context", params=params)
    if args.json:
        _print_json(answer)
    elif not answer["items"]:
        print("no memory matches, or none fits the budget", file=sys.stderr)
    else:
        print(answer["text"])
    return 0


def _pages(client: Client, path: str, key: str, **params: Any) -> Iterator[dict[str, Any]]:
    """Every row of a paged listing, following the `next` cursor to the end."""
    after = None
    while True:
        page = client.request("GET", path, params=_query(after=after, **params))
        yield from page[key]
        if (after := page["next"]) is None:
            return


def cmd_facts(args: argparse.Namespace) -> int:
    for fact in _pages(_client(args), "/v1/facts", "facts", scope=args.scope, kind=args.kind):
        if args.json:
            print(json.dumps(fact, ensure_ascii=False))
        else:
            seen = f"  (seen {fact['seen_count']}x)" if fact["seen_count"] > 1 else ""
            print(f"{fact['id']:>6}  {fact['scope']}  {fact['kind']:<10}"
                  f"  {fact['last_at'][:10]}  {fact['text']}{seen}")  # fmt: skip
    return 0


def _confirmed(scope: str) -> bool:
    """Ask on the terminal; without one, refuse (a script must say --yes)."""
    if not sys.stdin.isatty():
        raise ClientError(f"refusing to erase scope {scope!r} without confirmation:"
                          " no terminal to ask on; pass --yes")  # fmt: skip
    print(f"Erase all memory of scope {scope!r} (interactions, summaries, facts)?"
          " This cannot be undone. [y/N] ", end="", file=sys.stderr, flush=True)  # fmt: skip
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def cmd_forget(args: argparse.Namespace) -> int:
    if not args.yes and not _confirmed(args.scope):
        print("nothing erased", file=sys.stderr)
        return 1
    path = "/v1/scopes/" + quote(args.scope, safe="")
    deleted = _client(args).request("DELETE", path)["deleted"]
    print(f"erased scope {args.scope!r}: {deleted['interactions']} interactions,"
          f" {deleted['summaries']} summaries, {deleted['facts']} facts")  # fmt: skip
    return 0


def _export(client: Client, scope: str | None, out: TextIO) -> tuple[int, int]:
    counts = []
    for path, key, kind in (("/v1/summaries", "summaries", "summary"),
                            ("/v1/facts", "facts", "fact")):  # fmt: skip
        n = 0
        for row in _pages(client, path, key, scope=scope):
            out.write(json.dumps({"type": kind, **row}, ensure_ascii=False) + "\n")
            n += 1
        counts.append(n)
    return counts[0], counts[1]


def cmd_export(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.output is None:
        summaries, facts = _export(client, args.scope, sys.stdout)
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as out:
                summaries, facts = _export(client, args.scope, out)
        except OSError as exc:
            raise ClientError(f"cannot write {args.output}: {exc.strerror}") from exc
    where = args.output or "standard output"
    print(f"exported {summaries} summaries and {facts} facts to {where}", file=sys.stderr)
    return 0


def _add_recall_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    def query(
        name: str, handler: Callable[[argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        p = add(name, handler, help)
        p.add_argument("query", help="words to look for; no search syntax is needed or read")
        p.add_argument("--scope", help='the scope to look in (default: "default")')
        p.add_argument("--kind", choices=RECALL_KINDS, help="only memory of this kind")
        p.add_argument("--session", help="only memory from this session")
        p.add_argument("--types", help="comma-separated: fact, summary, interaction (default: all)")
        p.add_argument("--since", help="only what happened on or after this date (2023-05-07)")
        p.add_argument("--until", help="only what happened on or before this date")
        p.add_argument("--json", action="store_true", help="print the raw JSON answer")
        return p

    search = query("search", cmd_search, "search memory and what was said")
    search.add_argument("--limit", type=int, help="how many results (default: from the config)")
    context = query("context", cmd_context, "print the memory block an agent would be given")
    context.add_argument("--budget", type=int, help="tokens the block may use (default: config)")
    facts = add("facts", cmd_facts, "list stored facts, oldest first")
    facts.add_argument("--scope", help="only this scope (default: every scope)")
    facts.add_argument("--kind", choices=FACT_KINDS, help="only facts of this kind")
    facts.add_argument("--json", action="store_true", help="one JSON object per line")
    forget = add("forget", cmd_forget, "erase everything of a scope, for good")
    forget.add_argument("scope", help="the scope to erase")
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    export = add("export", cmd_export, "write summaries and facts as JSON lines")
    export.add_argument("--scope", help="only this scope (default: every scope)")
    export.add_argument("--output", "-o", help="file to write (default: standard output)")


def _seq_range(args: argparse.Namespace) -> dict[str, int]:
    return {k: v for k, v in (("from", args.from_seq), ("to", args.to_seq)) if v is not None}


def cmd_redistill(args: argparse.Namespace) -> int:
    # No client timeout: a slow local model may take minutes per dead letter.
    report = _client(args).request(
        "POST", "/v1/dead-letters/redistill", params=_seq_range(args), timeout=None
    )
    _print_json(report)
    return 0 if report["still_failing"] == 0 else 1


def cmd_dead_letters(args: argparse.Namespace) -> int:
    _print_json(_client(args).request("GET", "/v1/dead-letters", params=_seq_range(args)))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forged", description="A local memory daemon for LLM agents."
    )
    parser.add_argument("--version", action="version", version=f"forged {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config", help="configuration file (default: $FORGED_CONFIG or /etc/forged/forged.toml)"
    )
    common.add_argument("--socket", help="the daemon's socket (default: from the configuration)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, handler: Callable[[argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help, description=help)
        p.set_defaults(handler=handler)
        return p

    serve = add("serve", cmd_serve, "run the daemon")
    serve.add_argument(
        "--bundled-llm",
        action="store_true",
        help="start the bundled local model and distil with it",
    )
    add("check-config", cmd_check_config, "print the effective configuration, or the error")
    add("backup", cmd_backup, "copy the live database to FILE, checked").add_argument("file")
    restore = add("restore", cmd_restore, "put a backup back (the daemon must be stopped)")
    restore.add_argument("file")
    restore.add_argument("--yes", action="store_true", help="replace an existing database")
    push = add("push", cmd_push, "push interactions (a JSON object, a JSON array or NDJSON)")
    push.add_argument("file", nargs="?", default="-", help="file to push, - for standard input")
    status = add("status", cmd_status, "show the daemon's status")
    status.add_argument("--json", action="store_true", help="print the raw JSON answer")
    _add_recall_commands(add)
    for name, handler, text in (
        ("redistill", cmd_redistill, "distil the dead letters again (all, or a seq range)"),
        ("dead-letters", cmd_dead_letters, "list the open dead letters"),
    ):
        p = add(name, handler, text)
        p.add_argument("--from", dest="from_seq", type=int, metavar="SEQ", help="first seq")
        p.add_argument("--to", dest="to_seq", type=int, metavar="SEQ", help="last seq")
    return parser


def _leaf(exc: BaseException) -> BaseException:
    """The one error inside nested exception groups (trio wraps what a nursery raises)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except (ForgedError, BaseExceptionGroup) as exc:
        error = _leaf(exc)
        if isinstance(error, ConfigError):
            print(f"forged: config error: {error}", file=sys.stderr)
            return EXIT_CONFIG
        if isinstance(error, ForgedError):
            print(f"forged: {error}", file=sys.stderr)
            return 1
        raise
    except KeyboardInterrupt:
        return 130
