"""The report: each figure beside its baseline and their ratio, and the machine they came from."""

from __future__ import annotations

import os
import platform
import sqlite3
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

HEADER = ("measure", "forged", "baseline", "baseline value", "forged / baseline")
UNAVAILABLE = "n/a"


@dataclass(frozen=True)
class Row:
    """One figure: forged's value, what it is compared with, and that baseline's value."""

    measure: str
    value: float | None  # None: not measured (the note says why)
    unit: str  # "/s", "µs", "ms", "s", "MiB", "MB", "share" (0 to 1), "" (a count)
    baseline: str
    base: float | None
    note: str = ""  # shown instead of a missing value

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


def cells(row: Row) -> tuple[str, str, str, str, str]:
    """The row as the table shows it."""
    ratio = UNAVAILABLE if row.ratio is None else f"{row.ratio:.{2 if row.ratio >= 0.01 else 4}f}"
    base = _number(row.base, row.unit)
    return (row.measure, _number(row.value, row.unit, row.note), row.baseline, base, ratio)


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
    """The limit row forged is furthest from: the biggest cost factor over its baseline."""

    def cost(row: Row) -> float:
        assert row.ratio is not None
        return 1 / row.ratio if row.unit == "/s" else row.ratio

    limits = [r for r in rows if r.ratio and not r.measure.startswith(RIVAL_GROUP)]
    return max(limits, key=cost, default=None)


RIVAL_GROUP = ("batching", "quality")  # baselines that are other ways of working, not limits


def markdown(rows: list[Row], facts: dict[str, str], size: str, seconds: float, notes: str) -> str:
    """The whole of docs/benchmarks.md."""
    env = "\n".join(f"- **{k}**: {v}" for k, v in facts.items())
    worst = furthest(rows)
    verdict = (
        f"Furthest from its limit: **{worst.measure}**, {cells(worst)[4]} times its baseline.\n\n"
        if worst
        else ""
    )
    return (
        "# Benchmarks\n\n"
        f"`make bench` (size `{size}`, {seconds / 60:.1f} minutes) measured every figure beside its"
        " baseline in the same run, on the same machine and disk. Absolute numbers on a shared"
        " machine are noisy; the ratios are what to compare.\n\n"
        f"{markdown_table(rows)}\n\n{verdict}## Machine\n\n{env}\n\n"
        f"## How each figure is measured\n\n{notes}\n"
    )
