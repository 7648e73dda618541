"""The benchmarks at their smallest size, so `make bench` never rots; the report's arithmetic."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import trio

from bench import evaluate
from bench.__main__ import DEFAULT_OUT, report_path
from bench.corpus import locomo_path
from bench.quality import DISTILLERS
from bench.report import AT_LEAST_BARE, Goal, Row, furthest, goals
from bench.sizes import SIZES
from bench.stalls import LINES as LONG_LINES
from bench.stalls import PHASES as HAMMER_PHASES
from tests.support.postgres import binaries

pytestmark = pytest.mark.integration  # the benchmark runs daemons as child processes
REPO = Path(__file__).resolve().parents[1]
QUICK_TIMEOUT = 360.0  # seconds for `python -m bench --quick` on a busy two-core machine
GOAL = re.compile(r"^([≤≥] [\d.]+: (met|NOT met))?$")  # empty where forged promises no ratio
NUMBER = re.compile(r"^[\d,.]+( ?(/s|µs|ms|s|MiB|MB))?$")


def _expected_rows() -> list[str]:
    """The start of every measure the quick run must report, in order."""
    quick = SIZES["quick"]
    # four ways to push, then two of them beside the same with the turn index off
    rows = ["scrub: "] * 2 + ["ingest: "] * 6 + ["batching: "] * 3
    for n in quick.recall_facts:
        # search and context x 2, overlap, the turn index's build, size and p99s beside it off
        rows += [f"recall: {n:,} facts + {n:,} turns, "] * 9
    # 4 kinds of query x 4 through the socket, the turn index x 4, 4 kinds x 2 in the process,
    # scope B on 2 reader counts x 2, 2 overlaps
    rows += ["one scope: "] * 34
    # two distillers x each long line x (its time, /v1/status meanwhile); scope B idle, then
    # while one client hammers two, three and five scopes
    rows += ["stalls: "] * (2 * len(LONG_LINES) * 2 + 1 + len(HAMMER_PHASES))
    rows += ["memory: "] * 2 + ["start: "] * 2 + ["quality: "] * len(DISTILLERS) + ["consolidate: "]
    # the model's throughput, search p50 / p99 / p99 beside words, peak RSS, the index's RSS
    meaning = ["meaning: "] * 6
    if binaries() is None:  # the PostgreSQL step says it could not run
        return [*rows, "postgres: ", "import: ", "import: ", *meaning]
    return rows + ["postgres ingest: "] * 2 + ["postgres recall: "] * 4 + ["import: "] * 2 + meaning


def _table(markdown: str) -> list[list[str]]:
    lines = [line for line in markdown.splitlines() if line.startswith("| ")][1:]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


@pytest.mark.slow  # in the default run too
async def test_quick_bench_reports_every_figure_with_baseline_and_ratio(tmp_path: Path) -> None:
    """`python -m bench --quick` writes a table with every row measured beside its baseline."""
    out = tmp_path / "benchmarks.md"
    command = [
        sys.executable,
        "-m",
        "bench",
        "--quick",
        "--out",
        str(out),
        "--cache",
        str(tmp_path / "cache"),
    ]
    with trio.fail_after(QUICK_TIMEOUT):
        done = await trio.run_process(command, cwd=REPO, capture_stdout=True, capture_stderr=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    rows = _table(out.read_text())
    assert [r[0][: len(e)] for r, e in zip(rows, _expected_rows(), strict=True)] == _expected_rows()
    without_locomo = locomo_path(REPO) is None
    for measure, value, _, base, ratio, goal in rows:
        if without_locomo and measure.startswith("quality"):  # it measures on LoCoMo alone
            assert value.endswith("(LoCoMo not found)"), measure
            continue
        if measure == "postgres: ingest and recall":
            assert value.endswith("(no PostgreSQL binaries on this machine)"), measure
            continue
        assert NUMBER.match(value) and NUMBER.match(base) and NUMBER.match(ratio), measure
        assert GOAL.match(goal), measure
    with_goal = [r[0] for r in rows if r[5]]
    one_scope = [r[0] for r in rows if r[0].startswith("one scope: ") and r[5]]
    assert len(one_scope) == 6  # search p99 in the process of four kinds of query, scope B, overlap
    # scrub, 16 clients, one request, ingest beside it without the turn index, the one-scope
    # recall, the importer's peak RSS, search with vectors at p99 and the index's memory
    ingest = [rows[3][0], rows[5][0], rows[6][0], rows[7][0]]
    meaning = [r[0] for r in rows if r[0].startswith("meaning: ") and r[5]]
    assert len(meaning) == 2
    assert with_goal == [rows[0][0], *ingest, *one_scope, rows[-8][0], *meaning]
    assert "Goals met: " in out.read_text()
    assert "## Machine" in out.read_text() and "SQLite" in out.read_text()


def test_furthest_row_is_the_one_furthest_from_its_goal() -> None:
    """A rate short of its floor and a cost over its ceiling compare by how many times they
    miss; a row without a goal never counts; the verdict counts the goals met."""
    tenth = Goal(0.1, at_least=False)
    rows = [
        Row("ingest: bulk", 300.0, "/s", "bare", 1000.0, goal=Goal(0.5, at_least=True)),  # 1.67x
        Row("recall: search p99", 0.3, "ms", "bare", 1.0, goal=tenth),  # 3 times its ceiling
        Row("ingest: 16 clients", 1500.0, "/s", "bare", 1000.0, goal=AT_LEAST_BARE),  # met
        Row("batching: calls", 100.0, "", "one each", 1.0),  # no goal, far worse
        Row("recall: context p99", None, "ms", "bare", 1.0, "not measured", goal=tenth),
    ]
    assert furthest(rows) is rows[1]
    assert goals(rows) == (
        "Goals met: 1 of 3. Furthest from its goal: recall: search p99, 0.30 times its baseline"
        " (≤ 0.1: NOT met)."
    )
    assert goals(rows[2:4]).endswith("ingest: 16 clients, 1.50 times its baseline (≥ 1: met).")


def test_a_quick_run_leaves_the_tracked_report_alone() -> None:
    """`python -m bench --quick` (or --size large) writes under var/, never docs/benchmarks.md."""
    assert report_path("default") == DEFAULT_OUT
    for size in ("quick", "large"):
        assert report_path(size) == REPO / "var" / "bench" / f"benchmarks-{size}.md"


def test_eval_keeps_the_hand_measured_sections_and_the_bundled_model(tmp_path: Path) -> None:
    """A run keeps the small-model section and the bundled model's, and replaces the latter
    only when it measured it again."""
    out = tmp_path / "quality.md"
    small = f"{evaluate.KEPT_SECTION}\n\nmeasured by hand\n"
    bundled = f"{evaluate.BUNDLED_SECTION}\n\nold figures\n"
    out.write_text(f"# Quality\n\nold table\n\n{small}\n{bundled}")
    assert evaluate.tail(out, None) == f"\n{small}\n{bundled}"
    fresh = f"{evaluate.BUNDLED_SECTION}\n\nnew figures\n"
    assert evaluate.tail(out, fresh) == f"\n{small}\n{fresh}"
    out.write_text(f"# Quality\n\n{small}")
    assert evaluate.tail(out, None) == f"\n{small}"
    assert evaluate.tail(out, fresh) == f"\n{small}\n{fresh}"


def test_eval_without_meaning_keeps_its_section(tmp_path: Path) -> None:
    """A run without --meaning keeps the recall-by-meaning section as it was, up to the next
    section; a report without one gives none."""
    out = tmp_path / "quality.md"
    assert evaluate.kept_meaning(out) == ""
    section = f"{evaluate.MEANING_SECTION}\n\nold figures\n"
    out.write_text(f"# Quality\n\nagent\n\n{section}\n{evaluate.KEPT_SECTION}\n\nby hand\n")
    assert evaluate.kept_meaning(out) == f"\n{section}"
    out.write_text(f"# Quality\n\n{section}")
    assert evaluate.kept_meaning(out) == f"\n{section}"


def test_eval_bundled_only_replaces_the_bundled_section_alone(tmp_path: Path) -> None:
    """`--bundled-only` rewrites the bundled model's section and keeps every other one."""
    out = tmp_path / "quality.md"
    fresh = f"{evaluate.BUNDLED_SECTION}\n\nnew figures\n"
    assert evaluate.with_bundled(out, fresh) == fresh
    head = f"# Quality\n\ngold table\n\n{evaluate.KEPT_SECTION}\n\nmeasured by hand\n"
    out.write_text(head)
    assert evaluate.with_bundled(out, fresh) == f"{head}\n{fresh}"
    out.write_text(f"{head}\n{evaluate.BUNDLED_SECTION}\n\nold figures\n")
    assert evaluate.with_bundled(out, fresh) == f"{head}\n{fresh}"


def test_salience_baselines_keep_the_same_share_and_count_evidence() -> None:
    """Random and longest-first keep as many turns as asked; recall and precision are shares
    of the cited and of the kept turns."""
    from bench import salience
    from bench.quality import Conversation

    conv = Conversation("c", "locomo:c")
    conv.interactions = [
        {"id": f"c:D1:{n}", "messages": [{"role": "user", "name": "A", "text": "x" * n}]}
        for n in range(1, 11)
    ]
    random_, longest = salience.baselines(0.3, [conv], "offline")
    assert len(random_.turns) == len(longest.turns) == 3
    assert longest.turns == {("c", "D1:10"), ("c", "D1:9"), ("c", "D1:8")}
    kept = salience.Kept("offline", {("c", "D1:10"), ("c", "D1:1")}, ["Bye!", "I moved to Porto."])
    cells = salience.row(kept, [conv], {("c", "D1:10"), ("c", "D1:5")}).split(" | ")
    assert cells[1:5] == ["20.0%", "0.500", "0.500", "50.0%"]
