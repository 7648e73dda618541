"""Shared pieces of the reliability suite: the soak factor and the figures it records.

Every scenario runs at a small size in `make test`. `FORGED_SOAK=<n>` multiplies its counts by
`n` for a manual soak (for example `FORGED_SOAK=10 make test`); the timeouts grow with it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

SOAK = max(1, int(os.environ.get("FORGED_SOAK", "1") or 1))  # count multiplier for soak runs


def scaled(count: int) -> int:
    """A scenario's count at the current soak factor."""
    return count * SOAK


def memory_kib(pid: int) -> dict[str, int]:
    """VmHWM (peak) and VmRSS (current) of a process, in KiB, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            fields[name] = int(value.split()[0])
    return fields


def record(scenario: str, **figures: Any) -> None:
    """Write a scenario's figures to the test output (shown with `pytest -s` or `-rP`)."""
    text = ", ".join(f"{k}={v}" for k, v in figures.items())
    print(f"[reliability] {scenario}: {text}", file=sys.stderr)
