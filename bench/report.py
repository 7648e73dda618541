"""The report: each figure beside its baseline and their ratio, and the machine they came from."""

from __future__ import annotations

import os
import platform
import sqlite3
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

HEADER = ("measure", "forged", "baseline", "baseline value", "forged / baseline", "goal")
UNAVAILABLE = "n/a"


@dataclass(frozen=True)
class Goal:
    """What the ratio must reach: at least `bound` (a rate) or at most `bound` (a cost)."""

    bound: float
    at_least: bool

    def met(self, ratio: float) -> bool:
        return ratio >= self.bound if self.at_least else ratio <= self.bound

    def distance(self, ratio: float) -> float:
        """How many times the ratio falls short of the bound (under 1: met with room)."""
        return self.bound / ratio if self.at_least else ratio / self.bound

    def __str__(self) -> str:
        return f"{'≥' if self.at_least else '≤'} {self.bound:g}"


AT_LEAST_BARE = Goal(1.0, at_least=True)


@dataclass(frozen=True)
class Row:
    """One figure: forged's value, what it is compared with, and that baseline's value."""

    measure: str
    value: float | None  # None: not measured (the note says why)
    unit: str  # "/s", "µs", "ms", "s", "MiB", "MB", "share" (0 to 1), "" (a count)
    baseline: str
    base: float | None
    note: str = ""  # shown instead of a missing value
    goal: Goal | None = None  # the ratio forged promises, if it promises one

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.base:
            return None
        return self.value / self.base


def _number(value: float | None, unit: str, note: str = "") -> str:
    if value is None:
        return f"{UNAVAILABLE} ({note})" if note else UNAVAILABLE
    if unit == "/s":
        return f"{value:,.0f}/s"
    if unit == "µs":
        return f"{value:,.1f} µs"
    if unit == "ms":
        return f"{value:,.2f} ms" if value < 10 else f"{value:,.1f} ms"
    if unit == "s":
        return f"{value:,.2f} s"
    if unit == "share":  # a fraction from 0 to 1
        return f"{value:.3f}"
    if unit in ("MiB", "MB"):
        return f"{value:,.1f} {unit}"
    return f"{value:,.0f}"


def _verdict(row: Row) -> str:
    if row.goal is None:
        return ""
    if row.ratio is None:
        return f"{row.goal}: {UNAVAILABLE}"
    return f"{row.goal}: {'met' if row.goal.met(row.ratio) else 'NOT met'}"


def cells(row: Row) -> tuple[str, ...]:
    """The row as the table shows it."""
    ratio = UNAVAILABLE if row.ratio is None else f"{row.ratio:.{2 if row.ratio >= 0.01 else 4}f}"
    base = _number(row.base, row.unit)
    value = _number(row.value, row.unit, row.note)
    return (row.measure, value, row.baseline, base, ratio, _verdict(row))


def text_table(rows: list[Row]) -> str:
    """A plain table for the terminal."""
    table = [HEADER, *(cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells(r)) + " |" for r in rows]
    return "\n".join(lines)


def _first(path: str, prefix: str) -> str:
    try:
        with open(path) as f:
            return next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith(prefix)), ""
            )
    except OSError:
        return ""


def _filesystem(path: Path) -> str:
    """Device and file system type of the mount holding `path`."""
    best = ("", "", "")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                device, mount, fstype = line.split()[:3]
                if str(path.resolve()).startswith(mount) and len(mount) >= len(best[1]):
                    best = (device, mount, fstype)
    except OSError:
        return "unknown"
    return f"{best[2]} on {best[0]} (mounted at {best[1]})"


def machine(work: Path) -> dict[str, str]:
    """What the figures depend on, to print beside them."""
    ram_kib = _first("/proc/meminfo", "MemTotal").split()[0] or "0"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return {
        "CPU": _first("/proc/cpuinfo", "model name") or platform.processor() or "unknown",
        "cores": str(os.cpu_count()),
        "RAM": f"{int(ram_kib) / 1024**2:.1f} GiB",
        "disk": _filesystem(work),
        "OS": f"{platform.system()} {platform.release()}",
        "Python": sys.version.split()[0],
        "SQLite": sqlite3.sqlite_version,
        "load average at start": load,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def furthest(rows: list[Row]) -> Row | None:
    """The row with a goal that its ratio is furthest from (or nearest to, when all are met)."""

    def distance(row: Row) -> float:
        assert row.goal is not None and row.ratio is not None
        return row.goal.distance(row.ratio)

    return max((r for r in rows if r.goal and r.ratio), key=distance, default=None)


def goals(rows: list[Row]) -> str:
    """One line: how many goals the run met, and the one furthest from its goal."""
    judged = [r for r in rows if r.goal and r.ratio]
    if not judged:
        return ""
    met = sum(1 for r in judged if r.goal and r.ratio and r.goal.met(r.ratio))
    worst = furthest(judged)
    assert worst is not None
    return (
        f"Goals met: {met} of {len(judged)}. Furthest from its goal: {worst.measure},"
        f" {cells(worst)[4]} times its baseline ({_verdict(worst)})."
    )


def markdown(
    rows: list[Row], facts: dict[str, str], command: str, size: str, seconds: float, notes: str
) -> str:
    """The whole of docs/benchmarks.md."""
    env = "\n".join(f"- **{k}**: {v}" for k, v in facts.items())
    verdict = f"{goals(rows)}\n\n" if goals(rows) else ""
    return (
        "# Benchmarks\n\n"
        f"`{command}` (size `{size}`, {seconds / 60:.1f} minutes) measured every figure beside its"
        " baseline in the same run, on the same machine and disk. Absolute numbers on a shared"
        " machine are noisy; the ratios are what to compare.\n\n"
        f"{markdown_table(rows)}\n\n{verdict}## Machine\n\n{env}\n\n"
        f"## How each figure is measured\n\n{notes}\n"
    )
