"""How the command line shows the daemon's answers to people: status lines, rows and tables.

Each `show_*` prints one answer; what a person needs to read goes to standard output, a note
that there is nothing to show goes to standard error (so a pipe receives only data).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from forged.models import (
    DISTILL_OBSERVER,
    ContextAnswer,
    DeadLettersAnswer,
    EditsAnswer,
    FactAudit,
    FactChange,
    LoggedInteraction,
    MemoryItem,
    ObserverStatus,
    RedistillReport,
    ScopesAnswer,
    Status,
    StoredFact,
    StoredSummary,
)

__all__ = [
    "show_context",
    "show_dead_letters",
    "show_fact",
    "show_fact_audit",
    "show_redistill",
    "show_results",
    "show_status",
]


def _table(rows: Iterable[Sequence[object]], header: Sequence[str]) -> str:
    """Columns padded to their widest cell; the last one is left as it is."""
    cells = [list(header), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]]).rstrip()
        for row in cells
    )


def _clock(timestamp: str) -> str:
    """`2026-11-29T17:00:03.120Z` as `17:00:03`."""
    return timestamp[11:19]


def _for_how_long(since: str) -> str:
    """How long ago `since` was, in the largest unit that reads well: `40 s`, `12 min`, `3 h`."""
    elapsed = datetime.now(UTC) - datetime.fromisoformat(since.replace("Z", "+00:00"))
    seconds = max(0, int(elapsed.total_seconds()))  # the daemon's clock may be a little ahead
    if seconds < 120:
        return f"{seconds} s"
    return f"{seconds // 60} min" if seconds < 7200 else f"{seconds // 3600} h"


def _waiting_line(observer: str, since: str) -> str:
    """Since when an observer waits for its model, and what an operator can do about it."""
    fix = "start the model server" + (
        ", or distil without one: [distiller] offline = true"
        if observer == DISTILL_OBSERVER
        else ""
    )
    return (
        f"  waiting for its model since {since[:10]} {_clock(since)} UTC"
        f" ({_for_how_long(since)}); {fix}"
    )


def _observer_lines(o: ObserverStatus) -> list[str]:
    lines = [
        f"{o.name}: {o.state}, watermark {o.watermark}, backlog {o.backlog},"
        f" {o.batches} batches, {o.llm_calls} LLM calls"
        f" ({o.prompt_tokens} prompt + {o.completion_tokens} completion tokens,"
        f" {o.llm_ms / 1000:.1f} s), {o.dead_letters} dead letters"
    ]
    if o.waiting_since:  # through the retries between waits too: it has not answered since
        lines.append(_waiting_line(o.name, o.waiting_since))
    if o.batch is not None:
        size = f"{o.batch.interactions} interaction" + ("s" if o.batch.interactions != 1 else "")
        lines.append(
            f"  batch in flight: {size}"
            f" ({o.batch.tokens} tokens), started {_clock(o.batch.started_at)} UTC,"
            f" {o.batch.elapsed_s:.0f} s ago"
        )
    lines.append(f"  last batch: {o.last_batch_at or 'none yet'}")
    if o.items_per_s and o.backlog:  # the embed observer: how long its backlog will take
        left = o.backlog / o.items_per_s
        when = f"{left:.0f} s" if left < 120 else f"{left / 60:.0f} min"
        lines.append(f"  backlog: about {when} left at {o.items_per_s:g} items/s")
    if o.last_error:
        lines.append(f"  last error: {o.last_error}")
    return lines


def show_status(status: Status) -> None:
    state = "shutting down" if status.shutting_down else "ready" if status.ready else "starting"
    lines = [
        f"forged {status.version}, {state}, up {status.uptime_s:.0f} s",
        f"log: {status.log.count} interactions, last seq {status.log.last_seq}",
    ]
    for observer in status.observers:
        lines += _observer_lines(observer)
    if (index := status.index) is not None:
        behind = f", {index.backlog} turns behind" if index.backlog else ""
        failed = f" ({index.error}; the store's index answers)" if index.error else ""
        state = index.state.replace("_", " ")
        lines.append(f"turn index: {state}, last seq {index.watermark}{behind}{failed}")
    print("\n".join(lines))


def show_results(results: list[MemoryItem]) -> None:
    if not results:
        print("no memory matches", file=sys.stderr)
    best = max((item.score for item in results), default=0.0)
    for rank, item in enumerate(results, start=1):
        fixed = "" if item.corrected_by is None else f"  [corrected by #{item.corrected_by}]"
        print(
            f"{rank:>3}. {_match(item.score, best):>4}  {item.kind:<11}  {item.last_at[:10]}"
            f"  {' '.join(item.text.split())}{fixed}"
        )


def _match(score: float, best: float) -> str:
    """A score as a person reads it: how close to the best result of the search, in percent
    (a raw score such as 0.016 depends on the words and the store, and means nothing alone)."""
    return f"{round(100 * score / best)}%" if best > 0 else "-"


def show_context(answer: ContextAnswer) -> None:
    if not answer.items:
        print("no memory matches, or none fits the budget", file=sys.stderr)
    else:
        print(answer.text)


def _retired(fact: StoredFact) -> str:
    """How a superseded fact's line ends: since when, by what, and why."""
    if fact.superseded_by is None:
        return ""
    how = f"superseded {fact.invalid_at[:10]}" if fact.invalid_at else "merged"
    return f"  [{how} by #{fact.superseded_by}: {fact.superseded_reason}]"


def show_fact(fact: StoredFact) -> None:
    """One line: id, scope, kind, date, text, how often it was seen, and what retired it."""
    seen = f"  (seen {fact.seen_count}x)" if fact.seen_count > 1 else ""
    marks = ("  [pinned]" if fact.pinned else "") + ("  [by user]" if fact.source == "user" else "")
    print(
        f"{fact.id:>6}  {fact.scope}  {fact.kind:<10}"
        f"  {fact.last_at[:10]}  {fact.text}{seen}{marks}{_retired(fact)}"
    )


def _change_line(direction: str, change: FactChange) -> str:
    other = change.fact
    return (
        f"  {direction} #{other.id} ({change.action}, {change.created_at[:10]}): {other.text}"
        f"  [{change.reason}]"
    )


def show_fact_audit(audit: FactAudit) -> None:
    """The fact's line, then a line for each fact it replaced and for the one that replaced it."""
    show_fact(audit.fact)
    for change in audit.replaced:
        print(_change_line("replaced", change))
    if audit.replaced_by is not None:
        print(_change_line("replaced by", audit.replaced_by))


def show_scopes(answer: ScopesAnswer) -> None:
    if not answer.scopes:
        print("no scope holds anything yet", file=sys.stderr)
        return
    rows = [
        (
            s.interactions,
            s.facts,
            s.summaries,
            (s.last_at or "-")[:10],
            (s.last_received_at or "-")[:19].replace("T", " "),
            s.scope,
        )
        for s in answer.scopes
    ]
    print(_table(rows, ("TURNS", "FACTS", "SUMMARIES", "LAST DAY", "LAST PUSH (UTC)", "SCOPE")))


def show_interaction(item: LoggedInteraction) -> None:
    """The seq and day, then one indented line per message, speaker first."""
    print(f"#{item.seq}  {item.timestamp[:16].replace('T', ' ')}  {item.session or ''}".rstrip())
    for m in item.messages:
        print(f"    {m.name or m.role}: {m.text}")


def show_summary(summary: StoredSummary) -> None:
    condensed = f"  [condensed into #{summary.condensed_into}]" if summary.condensed_into else ""
    print(
        f"{summary.id:>6}  {summary.scope}  {summary.first_at[:10]}..{summary.last_at[:10]}"
        f"  {summary.text}{condensed}"
    )


def show_edits(answer: EditsAnswer) -> None:
    if not answer.edits:
        print("no edits yet", file=sys.stderr)
        return
    rows = [
        (
            e.id,
            e.created_at[:19].replace("T", " "),
            e.action,
            e.item,
            e.item_id,
            "" if e.into_id is None else f"-> #{e.into_id}",
            e.scope,
        )
        for e in answer.edits
    ]
    print(_table(rows, ("EDIT", "AT (UTC)", "ACTION", "ITEM", "ID", "INTO", "SCOPE")))


def show_dead_letters(answer: DeadLettersAnswer) -> None:
    if not answer.dead_letters:
        print("no open dead letters", file=sys.stderr)
        return
    rows = [
        (d.seq, d.scope, d.created_at[:19].replace("T", " "), d.reason) for d in answer.dead_letters
    ]
    print(_table(rows, ("SEQ", "SCOPE", "SINCE (UTC)", "REASON")))


def show_redistill(report: RedistillReport) -> None:
    rows = [(r.seq, r.outcome.replace("_", " "), r.facts, r.reason or "") for r in report.results]
    if rows:
        print(_table(rows, ("SEQ", "OUTCOME", "FACTS", "REASON")))
    print(
        f"{report.redistilled} redistilled, {report.still_failing} still failing", file=sys.stderr
    )
