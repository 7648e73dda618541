"""`make eval`: the quality benchmark on LoCoMo and on agent traffic made from it; prints the
tables and writes docs/quality.md."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import trio

from bench import (
    agenteval,
    agenttraffic,
    currentstate,
    grounding,
    meaning,
    quality,
    report,
    salience,
    smallmodel,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "docs" / "quality.md"
KEPT_SECTION = "## Small-model distillation"  # measured by bench.smallmodel, not by this run
CURRENT_STATE_SECTION = "## Current state after changes"
DISTORTIONS_SECTION = (  # what the grounding probes' table shows (docs/grounding.md)
    "## Distorted facts\n\nFacts a distorting model writes from a line (bench.distortions), by"
    " family, and faithful paraphrases: the share the grounding check refuses."
)
CURRENT_STATE_NOTES = """\
`bench.currentstate`: nine things said over five days, in which a city, a database, a name and a
preference change; distilled in two halves, then asked where the user lives, which database,
what name, which drink, each as a 200-token block of facts. A cell counts the questions whose
block holds only the current answer, and (in brackets) those holding the stale one. Stages:
consolidation off; on, before any run (supersession at distillation); after one run. The fake
answers deterministically; the bundled model is the one `make run BUNDLED=1` starts (`--no-bundled` leaves
it out)."""
BUNDLED_SECTION = "## The bundled model in `make eval`"  # kept by a run with --no-bundled
MEANING_SECTION = "## Recall by meaning"  # measured with --meaning (make eval), else kept
MEANING_NOTES = """\
`bench.meaning` (`--meaning`; `make eval` passes it): LoCoMo pushed into one daemon, distilled
offline (the default) and embedded by the embed observer; each question is then asked of that
daemon with `[embed] enabled = true` and of one without, on the same database: evidence recall
of search's ten best turns (the share of the turns LoCoMo cites as a question's evidence) and
the answer words of a 400-token block. The multilingual set (`bench.multilingual_set`): 48
memories in Chinese, Japanese, Korean, German, French and Spanish among 20 English
distractors, each asked for in other words in its language and in English; the share found in
search's five best turns. Agent traffic (`bench.agenttraffic`, its first three chats, measured
as in the section above): search's evidence@10 and the block's answer words, by a daemon
recalling by words and by one embedding the chats too. docs/embed.md says what the figures
mean for `[embed] enabled`."""
BUNDLED_NOTE = """\
`make eval` (`python -m bench.evaluate`; `--bundled-sessions N` for the first N sessions only,
`--bundled-only` for this section alone): the bundled model, SmolLM2-135M-Instruct in the
bundled default style (extractive), distils {sessions} of LoCoMo {conversation} ({turns}
turns) through the socket; the {questions} questions of categories 1-4 whose evidence lies in
them are then asked as above, beside the same baselines over the same turns. Every line
the model keeps is word for word one of those turns, and the block ranks it once, as that turn
(README, Recall): the block is forged's ranking of the turns, whatever the model picks; the
`linepicker` row of {conversation} under "Each conversation" is that ranking with no model.
Measured {date} in {minutes:.1f} minutes.

{table}

| batches | first-try valid | dead letters | facts | facts/batch | dropped ungrounded | s/batch | stored facts grounded (≥ 80 %) |
|---|---|---|---|---|---|---|---|
| {batches} | {first_try_valid:.0%} | {dead_letters} | {facts} | {facts_per_batch:.1f} | {ungrounded} | {seconds_per_batch:.1f} | {grounded_share:.0%} |

Salience on {conversation} (as under "Salience" above, over its {turns} turns):

{salience}
"""
SALIENCE_NOTES = """\
`bench.salience`: which turns each distiller keeps, against the {cited:,} turns of the
{turns:,} that a question of categories 1-4 cites as its evidence. A turn is kept when a stored
fact names it as a source. **small talk** is the share of kept items that forged.distill.salience's
documented rule calls small talk (no sentence states anything: greetings, thanks, sign-offs,
reactions, questions). **s/batch** is the distiller's time per committed batch (for the fake
LLM, its answer time), **CPU s/100 turns** the CPU the daemon (and a model server) used from
the push until everything was distilled (ingest and storing included; the fake LLM runs in
the benchmark's own process and is not counted). Under each distiller, two baselines keep the
same share of the same turns: a seeded random draw, and the longest turns first. The offline
distiller's weights were fitted on conversations 1-5 only (forged.distill.salience); the second table
splits every distiller's figures into those and the held-out 6-10."""
NOTES = """\
- **Data**: LoCoMo (`locomo10.json`), {conversations} conversation(s), {questions} questions of
  categories 1-4 (category 5, adversarial, has no answer to find). Each turn is pushed through
  the socket as one interaction (speaker as the message's name, a shared photo as its caption),
  timestamped with its session's date, in one NDJSON request; the daemon distils it in batches
  as it would any backlog.
- **Distillers**: two behaviours of the tests' fake LLM, and two without a model. `gold` answers LoCoMo's
  own `observation` facts for the turns in each batch (kind `{gold_kind}`, the summary being
  those facts in one paragraph): an upper bound given perfect distillation. `echo` is the
  fake's default answer, a fact quoting the first 60 characters of each interaction.
  `linepicker` is the extractive distiller without a model (`forged.distill.linepicker`, README,
  Styles): what any model must add to, measured beside the bundled model below. `offline`
  is the default without a model (`forged.distill.offline`, docs/salience.md): the salient lines.
- **Score**: for each question, the block is `GET /v1/context` with the question as `q` and
  `budget_tokens={budget}`. Answer-word recall is the share of the answer's content words
  (folded, stop words dropped, numbers without leading zeros) found anywhere in the block; a
  full-answer hit is a block holding all of them. Figures are means over questions.
- **Temporal**: LoCoMo's answers are dates relative to a session ("The week before 9 June
  2023"), and its observations carry no dates. forged's block dates every line by its session
  and follows a relative time in a line of one day with the day it meant ("yesterday
  (2023-06-08)", "last week (the week before 2023-06-09)"; README, Recall); the baselines show
  each turn as it was said, dated the same way. A question that names a date ("on October 13,
  2023", "in June") lifts what is dated then in forged's ranking. Month names are in no ISO
  date, and a day number is often found by chance in another line's date.
- **Open-domain** answers (category 3) are inferences ("Likely no; she wants to be a
  counselor") whose words are seldom said in the conversation or written in an observation:
  what a block holds of them is mostly a word said by chance in a loosely related turn
  ("like", "since", "park" in a photo's caption). BM25's block is about nine turns, forged's
  (gold) about four facts and six turns, so BM25 catches more such words by chance. A
  conversation has 7 to 14 of these questions and forged ties BM25 on most, so its cell is
  decided by one to three questions: at 360, 380, 420 and 440 tokens (measured on 1 December
  2026) the conversations under 1.0x were not the same ones as at 400. In the four under 1.0x
  with gold at 400 (1 December 2026), BM25's blocks held ten answer words forged's did not, in
  eight questions: "camping" and "outdoors" are words of the question, a ranking miss; the
  others are "john" (a speaker, for "John Williams"), "park" (a photo's caption), "family",
  "s", "since", "like", "back" and "change", from turns on another subject or matched on a
  question's function word. forged's held six that BM25's did not, in five questions.
- **Runs repeat**: the push is stored in one transaction and each batch is the next turns of
  the log up to the batch limits, whatever the scheduler does, so every run distils, and
  scores, the same (three runs on 1 December 2026 gave identical tables).
- **Baselines**, in the same run, at the same budget, token estimate, frame and line format
  (forged's own packing, each turn dated by its session): BM25 over the conversation's raw turns
  (SQLite FTS5 with forged's tokenizer and every word of the question, best {depth} turns,
  greedily packed) and the most recent turns that fit. forged leaves a question's function
  words out (README, Recall); a BM25 that left them out too would hold more answer words
  (forged's ratios over it were 1.14x gold and 1.03x echo when measured on 1 December 2026).
"""


def _verdict(results: quality.Results) -> str:
    """Each distiller's ratio to BM25 overall, and its weakest category."""
    lines = []
    for distiller in quality.distillers(results):
        ratio = {c: quality.ratio(results, distiller, c) for c in quality.CATEGORIES}
        worst = min(ratio, key=lambda c: ratio[c])
        overall = quality.ratio(results, distiller)
        lines.append(
            f"- `{distiller}`: forged's block holds {overall:.2f}x the answer words of"
            " BM25 over the raw turns; weakest category:"
            f" {quality.CATEGORIES[worst]} ({ratio[worst]:.2f}x)."
        )
    return "\n".join(lines)


def _dating(dated: tuple[int, int]) -> str:
    stored, right = dated
    return (
        f"- Dating: {right:,} of the {stored:,} gold facts stored ({right / max(stored, 1):.0%})"
        " are dated on one day, the day of a turn LoCoMo gives as their evidence: a fact is"
        " dated by the turns the grounding check finds it in (README, Grounding)."
    )


def markdown(
    results: quality.Results,
    dated: tuple[int, int],
    facts: dict[str, str],
    convs: int,
    seconds: float,
    kept: str = "",
) -> str:
    questions = len(results[(quality.distillers(results)[0], "forged")])
    notes = NOTES.format(
        conversations=convs,
        questions=questions,
        gold_kind=quality.GOLD_KIND,
        budget=quality.BUDGET,
        depth=quality.SEARCH_DEPTH,
    )
    env = "\n".join(f"- **{k}**: {v}" for k, v in facts.items())
    return (
        "# Quality\n\n"
        f"`make eval` ({seconds / 60:.1f} minutes): how much of each LoCoMo answer a"
        f" {quality.BUDGET}-token context block holds, beside plain search over what was said.\n\n"
        f"{quality.table(results)}\n\n{_verdict(results)}\n{_dating(dated)}\n\n"
        f"## Each conversation\n\n"
        f"{quality.per_conversation(results)}\n\n{kept}## Machine\n\n{env}\n\n"
        f"## How it is measured\n\n{notes}"
    )


def _kept(out: Path) -> str:
    """The report's hand-measured sections (from KEPT_SECTION on), which a run does not redo."""
    old = out.read_text() if out.exists() else ""
    at = old.find(KEPT_SECTION)
    return "\n" + old[at:] if at >= 0 else ""


def _bundled(sessions: int | None, work: Path) -> str:
    """The bundled model's section, measured now; empty without LoCoMo."""
    started = time.perf_counter()
    measured = trio.run(smallmodel.recall_quality, REPO, sessions, work)
    if measured is None:
        return ""
    results, figures = measured
    conv = quality.first_sessions_of(REPO, sessions)
    assert conv is not None
    date = report.machine(work)["date"]
    bundled = salience.kept(
        quality.BUNDLED, work / quality.BUNDLED / "forged.db", figures.pop("costs")
    )
    told = "every session" if sessions is None else f"the first {sessions} sessions"
    return f"{BUNDLED_SECTION}\n\n" + BUNDLED_NOTE.format(
        sessions=told,
        conversation=conv.sample_id,
        turns=len(conv.interactions),
        questions=len(results[(quality.BUNDLED, "forged")]),
        date=date,
        minutes=(time.perf_counter() - started) / 60,
        table=quality.table(results),
        salience=salience.table([bundled], [conv], REPO),
        **figures,
    )


def tail(out: Path, bundled: str | None) -> str:
    """What follows the run's own sections: the kept ones, the bundled model's replaced by
    `bundled` when it was measured again."""
    kept = _kept(out)
    at = kept.find(BUNDLED_SECTION)
    previous = "" if at < 0 else kept[at:]
    kept = kept if at < 0 else kept[:at]
    section = previous if bundled is None else bundled
    return kept.rstrip("\n") + "\n\n" + section if section else kept


def with_bundled(out: Path, bundled: str) -> str:
    """The report at `out` with the bundled model's section replaced by `bundled` (`--bundled-only`)."""
    old = out.read_text() if out.exists() else ""
    at = old.find(BUNDLED_SECTION)
    if at >= 0:
        return old[:at] + bundled
    return old.rstrip("\n") + "\n\n" + bundled if old else bundled


def _meaning(work: Path) -> str:
    """The recall-by-meaning section, measured now: printed, and returned for the report."""
    started = time.perf_counter()
    figures = trio.run(meaning.locomo, REPO, None, work / "meaning")
    languages = trio.run(meaning.multilingual, work / "meaning" / "multilingual")
    agent = trio.run(meaning.agent, REPO, meaning.AGENT_CHATS, work / "meaning" / "agent")
    table = meaning.report(figures, languages, agent)
    minutes = (time.perf_counter() - started) / 60
    section = (
        f"{MEANING_SECTION}\n\n{MEANING_NOTES} Measured in {minutes:.1f} minutes.\n\n{table}\n"
    )
    print(section)
    return f"\n{section}"


def kept_meaning(out: Path) -> str:
    """The recall-by-meaning section of the report at `out`, as a run without --meaning keeps it."""
    old = out.read_text() if out.exists() else ""
    at = old.find(MEANING_SECTION)
    if at < 0:
        return ""
    end = old.find("\n## ", at + len(MEANING_SECTION))
    return "\n" + old[at : end if end >= 0 else len(old)].rstrip("\n") + "\n"


def _bundled_only(sessions: int | None, out: Path) -> int:
    """`--bundled-only`: measure the bundled model's row and replace its section, nothing else."""
    with tempfile.TemporaryDirectory(prefix="fq") as work:  # short: socket paths fit
        bundled = _bundled(sessions, Path(work))
    if not bundled:
        print("eval: LoCoMo (shared/datasets/locomo10.json) not found; skipped", file=sys.stderr)
        return 0
    print(bundled)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(with_bundled(out, bundled))
    print(f"written to {out}")
    return 0


def _salience(
    work: Path,
    names: tuple[str, ...],
    convs: list[quality.Conversation],
    costs: dict[str, dict[str, float]],
) -> str:
    """The salience section: printed, and returned for the report."""
    kept = salience.measured(list(names), work, costs)
    cited = len(salience.evidence(REPO, convs))
    turns = sum(len(c.interactions) for c in convs)
    tables = f"{salience.table(kept, convs, REPO)}\n\n{salience.halves(kept, convs, REPO)}"
    print(tables + "\n")
    notes = SALIENCE_NOTES.format(cited=cited, turns=turns)
    return f"## Salience\n\n{notes}\n\n{tables}\n\n"


def _current_state(bundled: bool) -> str:
    """The current-state scenario's section: printed, and returned for the report."""
    results = currentstate.run(bundled)
    section = f"{currentstate.table(results)}\n\n{currentstate.verdict(results)}"
    print(section + "\n")
    return f"\n\n{CURRENT_STATE_SECTION}\n\n{CURRENT_STATE_NOTES}\n\n{section}\n"


def _distortions() -> str:
    """The grounding probes' section (bench.distortions): printed, and returned for the report."""
    table = grounding.distortion_markdown()
    print(table + "\n")
    return f"\n\n{DISTORTIONS_SECTION}\n\n{table}\n"


def _agent(limit: int | None, work: Path) -> str:
    """The agent-traffic section: printed, and returned for the report; empty without LoCoMo."""
    chats = agenttraffic.chats(REPO, limit)
    if not chats:
        return ""
    answered = trio.run(agenteval.measure, chats, work / "agent")
    kept = agenteval.kept(chats, work / "agent" / "forged.db")
    section = agenteval.section(chats, answered, kept)
    print(section)
    return f"\n{section}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.evaluate", description=__doc__)
    parser.add_argument("--conversations", type=int, help="only the first N (default: all)")
    parser.add_argument(
        "--agent-chats",
        type=int,
        metavar="N",
        help="agent traffic made of the first N LoCoMo conversations (default: all; 0: none)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the markdown report")
    parser.add_argument(
        "--no-bundled",
        action="store_true",
        help="leave the bundled model out (its LoCoMo section of --out is kept)",
    )
    parser.add_argument(
        "--meaning",
        action="store_true",
        help="measure recall by meaning too (bench.meaning: LoCoMo embedded, minutes of CPU);"
        " without it, the report's section of it is kept",
    )
    parser.add_argument(
        "--bundled-sessions",
        type=int,
        metavar="N",
        help="the bundled model distils LoCoMo conversation 0's first N sessions (default: all)",
    )
    parser.add_argument(
        "--bundled-only",
        action="store_true",
        help="only the bundled model's LoCoMo row, replacing its section of"
        " --out: no other distiller, no current-state scenario",
    )
    parser.add_argument(
        "--distillers",
        nargs="+",
        choices=quality.DISTILLERS,
        default=list(quality.DISTILLERS),
        metavar="NAME",
        help="only these of the model-free distillers"
        f" ({', '.join(quality.DISTILLERS)}; default: all)",
    )
    args = parser.parse_args(argv)
    if args.bundled_only:
        return _bundled_only(args.bundled_sessions, args.out)
    bundled_too = not args.no_bundled
    current = _current_state(bundled_too) + _distortions()
    convs = quality.conversations_of(REPO, args.conversations)
    if not convs:
        print("eval: LoCoMo (shared/datasets/locomo10.json) not found; skipped", file=sys.stderr)
        return 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fq") as work:  # short: socket paths fit
        facts = report.machine(Path(work))
        names, costs = tuple(args.distillers), {}
        results = trio.run(quality.measure, convs, Path(work), names, costs)
        dated = quality.dated_right(convs, Path(work) / "gold") if "gold" in names else (0, 0)
        seconds = time.perf_counter() - started
        kept = _salience(Path(work), names, convs, costs)
        agent = "" if args.agent_chats == 0 else _agent(args.agent_chats, Path(work))
        agent += _meaning(Path(work)) if args.meaning else kept_meaning(args.out)
        bundled = _bundled(args.bundled_sessions, Path(work)) if bundled_too else None
        if bundled:
            print(bundled)
    print(quality.table(results))
    print(_dating(dated))
    print()
    print(quality.per_conversation(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        markdown(results, dated, facts, len(convs), seconds, kept)
        + current
        + agent
        + tail(args.out, bundled)
    )
    print(f"\n{seconds:.0f} s; written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
