"""The `forged` command: run the daemon, or talk to it through `forged.client`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO, TypeVar

import msgspec

from forged import __version__
from forged.cli import display
from forged.cli.edits import add_edit_commands, add_scope_rule
from forged.client.methods import JSON, NDJSON, Client, find_config, find_socket
from forged.config import Config, StoreConfig, config_file, load_config, render_toml
from forged.errors import (
    AlreadyRunning,
    BackupError,
    BadRequest,
    ClientError,
    ConfigError,
    ForgedError,
    leaves,
)
from forged.models import DEFAULT_SCOPE, FACT_KINDS, RECALL_KINDS
from forged.store.backup import backup_target, restore_backup, take_backup

__all__ = [
    "EXIT_CONFIG",
    "EXIT_INTERRUPTED",
    "IMPORT_FORMATS",
    "cmd_backup",
    "cmd_check_config",
    "cmd_consolidate",
    "cmd_context",
    "cmd_dead_letters",
    "cmd_export",
    "cmd_fact",
    "cmd_facts",
    "cmd_forget",
    "cmd_import",
    "cmd_mcp",
    "cmd_push",
    "cmd_redistill",
    "cmd_reindex",
    "cmd_restore",
    "cmd_search",
    "cmd_serve",
    "cmd_status",
    "main",
]

EXIT_CONFIG = 2  # a bad configuration (or usage): systemd should not restart us in a loop
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports it
EXIT_PIPE_CLOSED = 141  # the reader of our output went away (`| head`), as a shell reports SIGPIPE
IMPORT_FORMATS = ("chatgpt", "claude", "jsonl")
T = TypeVar("T")


def _config(args: argparse.Namespace) -> Config:
    return load_config(config_file(args.config, os.environ), os.environ)


def _client(args: argparse.Namespace) -> Client:
    return Client(find_socket(args.socket, config=args.config))


def _print_json(value: Any) -> None:
    print(msgspec.json.format(msgspec.json.encode(value), indent=2).decode())


def _answer(args: argparse.Namespace, ask: Callable[[Client], T], show: Callable[[T], None]) -> T:
    """Ask the daemon once; print the answer as JSON with `--json`, else as `show` shows it."""
    with _client(args) as client:
        answer = ask(client)
    (_print_json if args.json else show)(answer)
    return answer


def cmd_serve(args: argparse.Namespace) -> int:
    import trio

    from forged.config import cache_directory
    from forged.daemon import backstop, log
    from forged.daemon.runner import run_daemon
    from forged.scrub import scan as scrub

    config = _config(args)
    if args.offline or args.bundled_llm:  # the flag chooses over the file's `offline`
        fields = {"offline": True, "class_": ""} if args.offline else {"offline": False}
        distiller = msgspec.structs.replace(config.distiller, **fields)
        config = msgspec.structs.replace(config, distiller=distiller)
    log.configure(config.log.format, config.log.level)
    scrub.prepare(cache_directory(os.environ))  # before the first push, not during it
    trio.run(lambda: run_daemon(config, bundled_llm=args.bundled_llm, backstop=backstop.arm))
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    from forged.daemon.loader import check_observers  # imports the daemon's modules: only here
    from forged.store.backend import check_store

    config, where = find_config(args.config)  # the same daemon the other commands talk to
    check_observers(config)
    store = check_store(config.store)  # reachable, and a schema this forged knows
    print(f"# effective configuration (from {where}, with FORGED_* overrides)")
    print(f"# {store}")
    print(render_toml(config).rstrip())
    return 0


def _sqlite_store(args: argparse.Namespace) -> StoreConfig:
    store = find_config(args.config)[0].store  # the database of the daemon `status` talks to
    if store.backend == "postgresql":
        raise BackupError("backup and restore copy the SQLite file; use pg_dump for PostgreSQL")
    return store


def cmd_backup(args: argparse.Namespace) -> int:
    target = backup_target(args.file)  # a directory gets a dated file in it
    info = take_backup(_sqlite_store(args), target)
    print(f"backed up to {target}: {info.describe()}")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    config = find_config(args.config)[0]
    database = _sqlite_store(args).path
    index = config.index.directory(config.store)  # of the database replaced
    info = restore_backup(Path(args.file), database, replace=args.yes, derived=index)
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


def cmd_status(args: argparse.Namespace) -> int:
    _answer(args, Client.status, display.show_status)
    return 0


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    """The query options search and context share."""
    return {
        "scope": args.scope,
        "kind": args.kind,
        "session": args.session,
        "types": args.types,
        "since": args.since,
        "until": args.until,
        "history": "true" if args.history else None,
    }


def cmd_search(args: argparse.Namespace) -> int:
    _answer(
        args,
        lambda c: c.search(args.query, **_filters(args), limit=args.limit).results,
        display.show_results,
    )
    return 0


def cmd_context(args: argparse.Namespace) -> int:
    _answer(
        args,
        lambda c: c.context(args.query, **_filters(args), budget_tokens=args.budget),
        display.show_context,
    )
    return 0


def cmd_facts(args: argparse.Namespace) -> int:
    with _client(args) as client:
        for fact in client.iter_facts(
            scope=args.scope, kind=args.kind, history=args.history, all_scopes=args.all_scopes
        ):
            if args.json:
                print(msgspec.json.encode(fact).decode())
                continue
            display.show_fact(fact)
    return 0


def cmd_fact(args: argparse.Namespace) -> int:
    try:
        _answer(
            args,
            lambda c: c.fact(args.id, scope=args.scope, all_scopes=args.all_scopes),
            display.show_fact_audit,
        )
    except BadRequest as exc:
        if exc.code != "not_found" or args.scope or args.all_scopes:
            raise
        raise ClientError(  # the scope rule took `default`: say so, and how to look elsewhere
            f"no fact {args.id} in scope {DEFAULT_SCOPE!r}; name its scope with --scope S,"
            " or look in every scope with --all-scopes"
        ) from None
    return 0


def cmd_consolidate(args: argparse.Namespace) -> int:
    _answer(args, lambda c: c.consolidate(args.scope), _print_json)
    return 0


def _confirmed(scope: str) -> bool:
    """Ask on the terminal; without one, refuse (a script must say --yes)."""
    if not sys.stdin.isatty():
        raise ClientError(
            f"refusing to erase scope {scope!r} without confirmation:"
            " no terminal to ask on; pass --yes"
        )
    print(
        f"Erase all memory of scope {scope!r} (interactions, summaries, facts)?"
        " This cannot be undone. [y/N] ",
        end="",
        file=sys.stderr,
        flush=True,
    )
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def cmd_reindex(args: argparse.Namespace) -> int:
    with _client(args) as client:
        index = client.reindex()
    print(
        f"rewriting the turn index from the store (up to seq {index.watermark + index.backlog});"
        " `forged status` shows when it is ready"
    )
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    if not args.yes and not _confirmed(args.scope):
        print("nothing erased", file=sys.stderr)
        return 1
    with _client(args) as client:
        deleted = client.forget(args.scope).deleted
    print(
        f"erased scope {args.scope!r}: {deleted.interactions} interactions,"
        f" {deleted.summaries} summaries, {deleted.facts} facts"
    )
    return 0


def _write_line(out: TextIO, kind: str, item: msgspec.Struct) -> None:
    out.write(msgspec.json.encode({"type": kind, **msgspec.to_builtins(item)}).decode())
    out.write("\n")


def _export_conversations(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    """The scope's interactions (every scope's with --all-scopes), verbatim, in time order."""
    scopes = [s.scope for s in client.scopes().scopes] if args.all_scopes else [args.scope]
    count = 0
    for scope in scopes:
        for item in client.iter_interactions(scope=scope):
            _write_line(out, "interaction", item)
            count += 1
    return count


def _export(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[int, int, int]:
    interactions = _export_conversations(client, args, out)
    summaries = facts = 0
    scope, every = args.scope, args.all_scopes
    for summary in client.iter_summaries(scope=scope, all_scopes=every):
        _write_line(out, "summary", summary)
        summaries += 1
    for fact in client.iter_facts(scope=scope, history=True, all_scopes=every):
        _write_line(out, "fact", fact)
        facts += 1
    return interactions, summaries, facts


def cmd_export(args: argparse.Namespace) -> int:
    with _client(args) as client:
        if args.output is None:
            counts = _export(client, args, sys.stdout)
        else:
            try:
                with open(args.output, "w", encoding="utf-8") as out:
                    counts = _export(client, args, out)
            except OSError as exc:
                raise ClientError(f"cannot write {args.output}: {exc.strerror}") from exc
    where = args.output or "standard output"
    interactions, summaries, facts = counts
    print(
        f"exported {interactions} interactions, {summaries} summaries and {facts} facts to {where}",
        file=sys.stderr,
    )
    return 0


def cmd_dead_letters(args: argparse.Namespace) -> int:
    _answer(
        args,
        lambda c: c.dead_letters(
            args.from_seq, args.to_seq, scope=args.scope, all_scopes=args.all_scopes
        ),
        display.show_dead_letters,
    )
    return 0


def cmd_redistill(args: argparse.Namespace) -> int:
    report = _answer(
        args, lambda c: c.redistill(args.from_seq, args.to_seq), display.show_redistill
    )
    return 0 if report.still_failing == 0 else 1


def cmd_import(args: argparse.Namespace) -> int:
    from forged.cli.importer import import_file

    with _client(args) as client:  # records skipped are reported, each with its reason
        report = import_file(client, args.format, Path(args.file), scope=args.scope)
    if report.bad and not report.turns:
        raise ClientError(
            f"nothing imported from {Path(args.file).name}: every one of its"
            f" {len(report.bad)} records was skipped (the reasons are above)"
        )
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from forged.cli.mcp import serve
    except ImportError as exc:
        raise ClientError(
            f"`forged mcp` needs the mcp extra: pip install 'forged[mcp]' ({exc})"
        ) from exc

    scope = args.scope or os.environ.get("FORGED_SCOPE") or None
    serve(find_socket(args.socket, config=args.config), scope)
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    from forged.ui.server import serve

    serve(find_socket(args.socket, config=args.config), args.port)
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
    add_scope_rule(facts)
    facts.add_argument("--kind", choices=FACT_KINDS, help="only facts of this kind")
    facts.add_argument("--history", action="store_true", help="superseded facts too, marked")
    facts.add_argument("--json", action="store_true", help="one JSON object per line")
    fact = add("fact", cmd_fact, "show a fact with what it replaced and what replaced it")
    fact.add_argument("id", type=int, help="the fact's id")
    fact.add_argument("--json", action="store_true", help="print the raw JSON answer")
    add_scope_rule(fact)
    consolidate = add("consolidate", cmd_consolidate, "consolidate facts now (scopes due, or one)")
    consolidate.add_argument("--scope", help="only this scope, due or not")
    add("reindex", cmd_reindex, "rewrite the turn index from the store")
    forget = add("forget", cmd_forget, "erase everything of a scope, for good")
    forget.add_argument("scope", help="the scope to erase")
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    export = add("export", cmd_export, "write summaries and facts as JSON lines")
    add_scope_rule(export)
    export.add_argument("--output", "-o", help="file to write (default: standard output)")


def _add_client_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    push = add("push", cmd_push, "push interactions (a JSON object, a JSON array or NDJSON)")
    push.add_argument("file", nargs="?", default="-", help="file to push, - for standard input")
    status = add("status", cmd_status, "show the daemon's status")
    status.add_argument("--json", action="store_true", help="print the raw JSON answer")
    _add_recall_commands(add)
    add_edit_commands(add)
    for name, handler, text in (
        ("redistill", cmd_redistill, "distil the dead letters again (all, or a seq range)"),
        ("dead-letters", cmd_dead_letters, "list the open dead letters"),
    ):
        p = add(name, handler, text)
        p.add_argument("--from", dest="from_seq", type=int, metavar="SEQ", help="first seq")
        p.add_argument("--to", dest="to_seq", type=int, metavar="SEQ", help="last seq")
        p.add_argument("--json", action="store_true", help="print the raw JSON answer")
        if name == "dead-letters":
            add_scope_rule(p)
    imports = add(
        "import",
        cmd_import,
        "import a chat history: a ChatGPT or Claude.ai export, or JSON lines of interactions",
    )
    imports.add_argument("format", choices=IMPORT_FORMATS, help="what the file is")
    imports.add_argument("file", help="conversations.json of an export, or a .jsonl file")
    imports.add_argument(
        "--scope",
        help='whose memory it becomes (default: "default", or each line\'s own for jsonl)',
    )
    ui = add("ui", cmd_ui, "serve the memory browser on loopback; open the URL it prints")
    ui.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free)")
    mcp = add("mcp", cmd_mcp, "serve forged's memory to an MCP host over standard input/output")
    mcp.add_argument(
        "--scope",
        help='the one scope the host may read and write (default: $FORGED_SCOPE, else "default")',
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forged", description="A local memory daemon for LLM agents."
    )
    parser.add_argument("--version", action="version", version=f"forged {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config", help="configuration file (default: $FORGED_CONFIG or /etc/forged/forged.toml)"
    )
    common.add_argument(
        "--socket",
        help="the daemon's socket (default: $FORGED_SOCKET, else from the configuration)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, handler: Callable[[argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help, description=help)
        p.set_defaults(handler=handler, json=False)  # a command without --json shows for people
        return p

    serve = add("serve", cmd_serve, "run the daemon")
    distiller = serve.add_mutually_exclusive_group()
    distiller.add_argument(
        "--bundled-llm",
        action="store_true",
        help="start the bundled local model and distil with it",
    )
    distiller.add_argument(
        "--offline",
        action="store_true",
        help="distil with no model: keep the salient lines verbatim (forged.distill.offline)",
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
    except* BrokenPipeError:
        _stop_writing()
        code = EXIT_PIPE_CLOSED
    return code


def _stop_writing() -> None:
    """Point standard output at /dev/null: the reader has gone (`forged facts | head`), and the
    flush at exit would fail again with a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
