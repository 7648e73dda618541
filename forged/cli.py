"""The `forged` command: run the daemon, or talk to it through `forged.client`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

import msgspec

from forged import __version__
from forged.backup import restore_backup, take_backup
from forged.client import JSON, NDJSON, Client, find_socket
from forged.config import Config, StoreConfig, config_file, load_config, moved_keys, render_toml
from forged.errors import (
    AlreadyRunning,
    BackupError,
    ClientError,
    ConfigError,
    ForgedError,
    leaves,
)
from forged.models import (
    FACT_KINDS,
    RECALL_KINDS,
    MemoryItem,
    ObserverStatus,
    Status,
    StoredFact,
)

EXIT_CONFIG = 2  # a bad configuration (or usage): systemd should not restart us in a loop
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports it
IMPORT_FORMATS = ("chatgpt", "claude", "jsonl")


def _config(args: argparse.Namespace) -> Config:
    return load_config(config_file(args.config, os.environ), os.environ)


def _client(args: argparse.Namespace) -> Client:
    return Client(find_socket(args.socket, config=args.config))


def _print_json(value: Any) -> None:
    print(msgspec.json.format(msgspec.json.encode(value), indent=2).decode())


def _table(rows: Iterable[Sequence[object]], header: Sequence[str]) -> str:
    """Columns padded to their widest cell; the last one is left as it is."""
    cells = [list(header), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]]).rstrip()
        for row in cells
    )


def cmd_serve(args: argparse.Namespace) -> int:
    import structlog
    import trio

    from forged import log
    from forged.daemon import run_daemon

    config = _config(args)
    log.configure(config.log.format, config.log.level)
    for old, new in moved_keys(config_file(args.config, os.environ)):
        structlog.get_logger("forged.config").warning("config_deprecated", key=old, use=new)
    trio.run(lambda: run_daemon(config, bundled_llm=args.bundled_llm))
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    from forged.backend import check_store
    from forged.plugins import check_observers  # imports the daemon's modules: only here

    config = _config(args)
    check_observers(config)
    store = check_store(config.store)  # reachable, and a schema this forged knows
    path = config_file(args.config, os.environ)
    print(
        f"# effective configuration (from {path or 'embedded defaults'}, with FORGED_* overrides)"
    )
    print(f"# {store}")
    for old, new in moved_keys(path):
        print(f"# {old} is read as {new}: write it there (the old place is deprecated)")
    print(render_toml(config).rstrip())
    return 0


def _sqlite_store(args: argparse.Namespace) -> StoreConfig:
    store = _config(args).store
    if store.backend == "postgresql":
        raise BackupError("backup and restore copy the SQLite file; use pg_dump for PostgreSQL")
    return store


def cmd_backup(args: argparse.Namespace) -> int:
    info = take_backup(_sqlite_store(args), Path(args.file))
    print(f"backed up to {args.file}: {info.describe()}")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    database = _sqlite_store(args).path
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
        return NDJSON
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError:
        return NDJSON
    return JSON


def cmd_push(args: argparse.Namespace) -> int:
    data = _read_input(args.file)
    with _client(args) as client:
        _print_json(client.push_body(data, _content_type(data, args.file)))
    return 0


def _clock(timestamp: str) -> str:
    """`2026-11-29T17:00:03.120Z` as `17:00:03`."""
    return timestamp[11:19]


def _format_observer(o: ObserverStatus) -> list[str]:
    lines = [
        f"{o.name}: {o.state}, watermark {o.watermark}, backlog {o.backlog},"
        f" {o.batches} batches, {o.llm_calls} LLM calls"
        f" ({o.prompt_tokens} prompt + {o.completion_tokens} completion tokens,"
        f" {o.llm_ms / 1000:.1f} s), {o.dead_letters} dead letters"
    ]
    if o.batch is not None:
        size = f"{o.batch.interactions} interaction" + ("s" if o.batch.interactions != 1 else "")
        lines.append(f"  batch in flight: {size}"
                     f" ({o.batch.tokens} tokens), started {_clock(o.batch.started_at)} UTC,"
                     f" {o.batch.elapsed_s:.0f} s ago")  # fmt: skip
    lines.append(f"  last batch: {o.last_batch_at or 'none yet'}")
    if o.last_error:
        lines.append(f"  last error: {o.last_error}")
    return lines


def _format_status(status: Status) -> str:
    state = "shutting down" if status.shutting_down else "ready" if status.ready else "starting"
    lines = [
        f"forged {status.version}, {state}, up {status.uptime_s:.0f} s",
        f"log: {status.log.count} interactions, last seq {status.log.last_seq}",
    ]
    for observer in status.observers:
        lines += _format_observer(observer)
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        status = client.status()
    if args.json:
        _print_json(status)
    else:
        print(_format_status(status))
    return 0


def _format_result(item: MemoryItem) -> str:
    return f"{item.score:9.3g}  {item.kind:<11}  {item.last_at[:10]}  {' '.join(item.text.split())}"


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    """The query options search and context share."""
    return {"scope": args.scope, "kind": args.kind, "session": args.session, "types": args.types,
            "since": args.since, "until": args.until,
            "history": "true" if args.history else None}  # fmt: skip


def cmd_search(args: argparse.Namespace) -> int:
    with _client(args) as client:
        results = client.search(args.query, **_filters(args), limit=args.limit).results
    if args.json:
        _print_json(results)
        return 0
    if not results:
        print("no memory matches", file=sys.stderr)
    for item in results:
        print(_format_result(item))
    return 0


def cmd_context(args: argparse.Namespace) -> int:
    with _client(args) as client:
        answer = client.context(args.query, **_filters(args), budget_tokens=args.budget)
    if args.json:
        _print_json(answer)
    elif not answer.items:
        print("no memory matches, or none fits the budget", file=sys.stderr)
    else:
        print(answer.text)
    return 0


def _retired(fact: StoredFact) -> str:
    """How a superseded fact's line ends: since when, by what, and why."""
    if fact.superseded_by is None:
        return ""
    how = f"superseded {fact.invalid_at[:10]}" if fact.invalid_at else "merged"
    return f"  [{how} by #{fact.superseded_by}: {fact.superseded_reason}]"


def cmd_facts(args: argparse.Namespace) -> int:
    with _client(args) as client:
        for fact in client.iter_facts(scope=args.scope, kind=args.kind, history=args.history):
            if args.json:
                print(msgspec.json.encode(fact).decode())
                continue
            seen = f"  (seen {fact.seen_count}x)" if fact.seen_count > 1 else ""
            print(f"{fact.id:>6}  {fact.scope}  {fact.kind:<10}"
                  f"  {fact.last_at[:10]}  {fact.text}{seen}{_retired(fact)}")  # fmt: skip
    return 0


def cmd_fact(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _print_json(client.fact(args.id))
    return 0


def cmd_consolidate(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _print_json(client.consolidate(args.scope))
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
    with _client(args) as client:
        deleted = client.forget(args.scope).deleted
    print(f"erased scope {args.scope!r}: {deleted.interactions} interactions,"
          f" {deleted.summaries} summaries, {deleted.facts} facts")  # fmt: skip
    return 0


def _export(client: Client, scope: str | None, out: TextIO) -> tuple[int, int]:
    summaries = facts = 0
    for summary in client.iter_summaries(scope=scope):
        out.write(msgspec.json.encode({"type": "summary", **msgspec.to_builtins(summary)}).decode())
        out.write("\n")
        summaries += 1
    for fact in client.iter_facts(scope=scope, history=True):
        out.write(msgspec.json.encode({"type": "fact", **msgspec.to_builtins(fact)}).decode())
        out.write("\n")
        facts += 1
    return summaries, facts


def cmd_export(args: argparse.Namespace) -> int:
    with _client(args) as client:
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


def cmd_dead_letters(args: argparse.Namespace) -> int:
    with _client(args) as client:
        answer = client.dead_letters(args.from_seq, args.to_seq)
    if args.json:
        _print_json(answer)
    elif not answer.dead_letters:
        print("no open dead letters", file=sys.stderr)
    else:
        rows = [(d.seq, d.scope, d.created_at[:19].replace("T", " "), d.reason)
                for d in answer.dead_letters]  # fmt: skip
        print(_table(rows, ("SEQ", "SCOPE", "SINCE (UTC)", "REASON")))
    return 0


def cmd_redistill(args: argparse.Namespace) -> int:
    with _client(args) as client:
        report = client.redistill(args.from_seq, args.to_seq)
    if args.json:
        _print_json(report)
    else:
        rows = [(r.seq, r.outcome.replace("_", " "), r.facts, r.reason or "")
                for r in report.results]  # fmt: skip
        if rows:
            print(_table(rows, ("SEQ", "OUTCOME", "FACTS", "REASON")))
        print(f"{report.redistilled} redistilled, {report.still_failing} still failing",
              file=sys.stderr)  # fmt: skip
    return 0 if report.still_failing == 0 else 1


def cmd_import(args: argparse.Namespace) -> int:
    from forged.importer import import_file

    with _client(args) as client:  # records skipped are reported; the import itself succeeded
        import_file(client, args.format, Path(args.file), scope=args.scope)
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from forged.mcp_server import serve
    except ImportError as exc:
        raise ClientError(
            f"`forged mcp` needs the mcp extra: pip install 'forged[mcp]' ({exc})"
        ) from exc

    scope = args.scope or os.environ.get("FORGED_SCOPE") or None
    serve(find_socket(args.socket, config=args.config), scope)
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
        p.add_argument("--history", action="store_true", help="superseded facts too, marked")
        p.add_argument("--json", action="store_true", help="print the raw JSON answer")
        return p

    search = query("search", cmd_search, "search memory and what was said")
    search.add_argument("--limit", type=int, help="how many results (default: from the config)")
    context = query("context", cmd_context, "print the memory block an agent would be given")
    context.add_argument("--budget", type=int, help="tokens the block may use (default: config)")
    facts = add("facts", cmd_facts, "list stored facts, oldest first")
    facts.add_argument("--scope", help="only this scope (default: every scope)")
    facts.add_argument("--kind", choices=FACT_KINDS, help="only facts of this kind")
    facts.add_argument("--history", action="store_true", help="superseded facts too, marked")
    facts.add_argument("--json", action="store_true", help="one JSON object per line")
    fact = add("fact", cmd_fact, "show a fact with what it replaced and what replaced it")
    fact.add_argument("id", type=int, help="the fact's id")
    consolidate = add("consolidate", cmd_consolidate, "consolidate facts now (scopes due, or one)")
    consolidate.add_argument("--scope", help="only this scope, due or not")
    forget = add("forget", cmd_forget, "erase everything of a scope, for good")
    forget.add_argument("scope", help="the scope to erase")
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    export = add("export", cmd_export, "write summaries and facts as JSON lines")
    export.add_argument("--scope", help="only this scope (default: every scope)")
    export.add_argument("--output", "-o", help="file to write (default: standard output)")


def _add_client_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
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
        p.add_argument("--json", action="store_true", help="print the raw JSON answer")
    imports = add("import", cmd_import, "import a chat history: a ChatGPT or Claude.ai export, "
                  "or JSON lines of interactions")  # fmt: skip
    imports.add_argument("format", choices=IMPORT_FORMATS, help="what the file is")
    imports.add_argument("file", help="conversations.json of an export, or a .jsonl file")
    imports.add_argument("--scope", help='whose memory it becomes (default: "default", or each '
                         "line's own for jsonl)")  # fmt: skip
    mcp = add("mcp", cmd_mcp, "serve forged's memory to an MCP host over standard input/output")
    mcp.add_argument("--scope", help="the one scope the host may read and write "
                     '(default: $FORGED_SCOPE, else "default")')  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forged", description="A local memory daemon for LLM agents."
    )
    parser.add_argument("--version", action="version", version=f"forged {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config", help="configuration file (default: $FORGED_CONFIG or /etc/forged/forged.toml)"
    )
    common.add_argument("--socket", help="the daemon's socket (default: $FORGED_SOCKET, else "
                        "from the configuration)")  # fmt: skip
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
    _add_client_commands(add)
    return parser


def _complain(group: BaseExceptionGroup[ForgedError], prefix: str = "") -> None:
    for error in leaves(group):
        print(f"forged: {prefix}{error}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    code = 1
    try:
        code = int(args.handler(args))
    except* ConfigError as group:  # trio wraps what the daemon raises in exception groups
        _complain(group, "config error: ")
        code = EXIT_CONFIG
    except* AlreadyRunning as group:  # not a config problem: another daemon holds the socket
        _complain(group)
        code = EXIT_CONFIG
    except* ForgedError as group:
        _complain(group)
        code = 1
    except* KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    return code
