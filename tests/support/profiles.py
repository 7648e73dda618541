"""Hypothesis profiles: `make test` runs every property on its full count of examples, `make
check` (the `check` profile) on a fifth of it, so the inner loop stays fast."""

from __future__ import annotations

from hypothesis import settings

FULL = 100  # examples of a property that names no count (hypothesis's own default)
CHECK_SHARE = 5  # `make check` runs this many times fewer
MIN_EXAMPLES = 10  # but never fewer than this


def register_profiles() -> None:
    settings.register_profile("check", max_examples=FULL // CHECK_SHARE)


def examples(full: int) -> int:
    """`full` examples by default; under `check`, its share (at least `MIN_EXAMPLES`)."""
    share = settings.default.max_examples / FULL
    return full if share >= 1 else max(MIN_EXAMPLES, round(full * share))
