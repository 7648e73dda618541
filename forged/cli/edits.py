"""The command line's commands that look at memory item by item and edit it: scopes,
interactions, summaries, delete, correct, add-fact, pin, unpin, edits.

`forged.cli` adds them to its parser; each asks the daemon once through `forged.client`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from forged.cli import display
from forged.client.methods import Client, find_socket
from forged.errors import ClientError
from forged.models import FACT_KINDS, Erased, FactAudit, FactKind

__all__ = [
    "ITEMS",
    "add_edit_commands",
    "add_scope_rule",
    "cmd_add_fact",
    "cmd_correct",
    "cmd_delete",
    "cmd_edits",
    "cmd_interactions",
    "cmd_pin",
    "cmd_scopes",
    "cmd_summaries",
]

ITEMS = ("fact", "summary", "interaction")


def add_scope_rule(command: argparse.ArgumentParser) -> None:
    """The one scope rule, for listings and edits alike: one scope (`default` unless named), or
    every scope by asking."""
    which = command.add_mutually_exclusive_group()
    which.add_argument("--scope", help='only this scope (default: "default")')
    which.add_argument("--all-scopes", action="store_true", help="every scope")


def _scope(args: argparse.Namespace) -> dict[str, Any]:
    return {"scope": args.scope, "all_scopes": args.all_scopes}


def _client(args: argparse.Namespace) -> Client:
    return Client(find_socket(args.socket, config=args.config))


def _print_json(value: Any) -> None:
    print(msgspec.json.format(msgspec.json.encode(value), indent=2).decode())


def _show(args: argparse.Namespace, value: Any, show: Callable[[Any], None]) -> int:
    (_print_json if args.json else show)(value)
    return 0


def cmd_scopes(args: argparse.Namespace) -> int:
    with _client(args) as client:
        return _show(args, client.scopes(), display.show_scopes)


def cmd_interactions(args: argparse.Namespace) -> int:
    with _client(args) as client:
        for item in client.iter_interactions(scope=args.scope, since=args.since, until=args.until):
            if args.json:  # a line `forged import jsonl` reads back
                print(msgspec.json.encode(item).decode())
            else:
                display.show_interaction(item)
    return 0


def cmd_summaries(args: argparse.Namespace) -> int:
    with _client(args) as client:
        for summary in client.iter_summaries(**_scope(args)):
            if args.json:
                print(msgspec.json.encode(summary).decode())
            else:
                display.show_summary(summary)
    return 0


def _confirmed(item: str, item_id: int) -> bool:
    """Ask on the terminal; without one, refuse (a script must say --yes)."""
    if not sys.stdin.isatty():
        raise ClientError(
            f"refusing to erase {item} {item_id} without confirmation: no terminal"
            " to ask on; pass --yes"
        )
    print(
        f"Erase {item} {item_id} for good? This cannot be undone. [y/N] ",
        end="",
        file=sys.stderr,
        flush=True,
    )
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _show_erased(erased: Erased) -> None:
    d = erased.deleted
    print(
        f"erased (edit {erased.edit}): {d.interactions} interactions, {d.summaries} summaries,"
        f" {d.facts} facts"
    )


def cmd_delete(args: argparse.Namespace) -> int:
    if not args.yes and not _confirmed(args.item, args.id):
        print("nothing erased", file=sys.stderr)
        return 1
    with _client(args) as client:
        return _show(args, client.delete(args.item, args.id, **_scope(args)), _show_erased)


def _show_audit(audit: FactAudit) -> None:
    display.show_fact(audit.fact)
    for change in audit.replaced:
        print(f"        replaces #{change.fact.id} ({change.reason}): {change.fact.text}")


def cmd_correct(args: argparse.Namespace) -> int:
    kind: FactKind | None = args.kind
    with _client(args) as client:
        audit = client.correct(args.id, args.text, kind, at=args.at, **_scope(args))
        return _show(args, audit, _show_audit)


def cmd_add_fact(args: argparse.Namespace) -> int:
    with _client(args) as client:
        audit = client.add_fact(
            args.text,
            kind=args.kind,
            scope=args.scope or "default",
            at=args.at,
            session=args.session,
        )
        return _show(args, audit, _show_audit)


def cmd_pin(args: argparse.Namespace) -> int:
    with _client(args) as client:
        return _show(args, client.pin(args.id, args.pinned, **_scope(args)), _show_audit)


def cmd_edits(args: argparse.Namespace) -> int:
    with _client(args) as client:
        return _show(args, client.edits(**_scope(args)), display.show_edits)


def add_edit_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """The commands above, on the parser `add` creates them in."""
    scopes = add("scopes", cmd_scopes, "list the scopes with their counts and last activity")
    shown = add("interactions", cmd_interactions, "list a scope's interactions by time")
    shown.add_argument("--scope", help='the scope (default: "default")')
    shown.add_argument("--since", help="only on or after this date (2023-05-07)")
    shown.add_argument("--until", help="only on or before this date")
    summaries = add("summaries", cmd_summaries, "list stored summaries, oldest first")
    delete = add("delete", cmd_delete, "erase one fact, summary or interaction, for good")
    delete.add_argument("item", choices=ITEMS, help="what to erase")
    delete.add_argument("id", type=int, help="its id (an interaction's seq)")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    correct = add("correct", cmd_correct, "replace a fact by what it should say")
    correct.add_argument("id", type=int, help="the fact's id")
    correct.add_argument("text", help="the corrected fact, one self-contained sentence")
    correct.add_argument("--kind", choices=FACT_KINDS, help="its kind (default: the fact's)")
    correct.add_argument(
        "--at", help="when what it says became true (ISO 8601; default: the fact's dates)"
    )
    added = add("add-fact", cmd_add_fact, "write a fact by hand")
    added.add_argument("text", help="the fact, one self-contained sentence")
    added.add_argument("--kind", choices=FACT_KINDS, default="state", help="default: state")
    added.add_argument("--scope", help='whose memory it is (default: "default")')
    added.add_argument("--at", help="when it became true (ISO 8601; default: now)")
    added.add_argument("--session", help="the conversation it belongs to")
    pins = []
    for name, pinned, text in (
        ("pin", True, "keep a fact: consolidation never retires it"),
        ("unpin", False, "let consolidation retire a fact again"),
    ):
        pins.append(p := add(name, cmd_pin, text))
        p.add_argument("id", type=int, help="the fact's id")
        p.set_defaults(pinned=pinned)
    trail = add("edits", cmd_edits, "list the edit trail, newest first")
    for p in (summaries, delete, correct, trail, *pins):
        add_scope_rule(p)
    for p in (scopes, shown, summaries, delete, correct, added, trail, *pins):
        p.add_argument("--json", action="store_true", help="print the raw JSON answer")
