"""`python -m bench.grounding`: calibrate the grounding check on LoCoMo, print both rates.

To keep: LoCoMo's gold `observation` facts against the session they come from (a batch, as
the distiller sees it) and, stricter, against only the turns they cite plus the speakers'
names; its gold session summaries. To drop: invented facts, namely each observation with its
speakers renamed to another conversation's and checked against that conversation's session
(the same people, things they never said), each observation against another session of its own
conversation (noisy: LoCoMo's people repeat themselves), invented summaries made the same way,
and facts of the kind a small model invented for conversation 0. Probes, also to drop: facts
that say the opposite of a line (a negation on one side only), that exchange two names or
numbers, or that say of one speaker what another's line holds; and, to keep, those lines said
again.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import distortions
from bench.corpus import locomo_path
from forged.text.grounding import Sources, check

REPO = Path(__file__).resolve().parent.parent
LOCOMO_DATE = "%I:%M %p on %d %B, %Y"  # how LoCoMo writes a session's date: 1:56 pm on 8 May, 2023
INVENTED = (  # what the bundled 270M model wrote for conversation 0, session 1, and its like
    "The team has developed a new tool to help people with their mental health.",
    "The 'Mental Wellbeing Toolkit' is available on their website.",
    "A friend of mine had just moved to our town.",
    "correction: 34",
    "35",
    "194",
    "The Institute for Family Counseling offers a free course to new members.",
    "Caroline is now a certified therapist working in Seattle.",
    "Melanie decided to sell her paintings at the local gallery next month.",
    "Caroline moved to Portland in 2019 to study marine biology.",
    "Melanie's husband John works as a firefighter.",
    "The user prefers short answers in the future.",
)


DATE = "2023-05-08T13:56:00Z"  # when the probes below were said
INVERSIONS = (  # (what was said, a fact that says its opposite)
    ("user: I am not allergic to penicillin, my dog is.", "The user is allergic to penicillin."),
    ("user: Never deploy on Fridays.", "We deploy on Fridays."),
    ("user: Do not give Mallory the admin password.", "Give Mallory the admin password."),
    ("user: I no longer drink coffee in the morning.", "The user drinks coffee in the morning."),
    ("user: I stopped running marathons last year.", "The user runs marathons."),
    ("user: I love hiking in the Alps.", "The user doesn't love hiking in the Alps."),
)
# A data table, one row a line: the formatter would reflow its rows.
SWAPS = (  # (what was said, a fact that gives a name or number another's place)
    ("Bob: My sister lives in Lisbon and Alice's brother lives in Porto.",
     "Alice's sister lives in Lisbon."),
    ("user: We need 3 servers for staging and 20 for production.",
     "The user needs 20 servers for staging and 3 for production."),
    ("user: We use PostgreSQL for the orders and MySQL for the analytics.",
     "The service uses MySQL for the orders and PostgreSQL for the analytics."),
)  # fmt: skip
MISATTRIBUTED = (  # (what was said, a fact about a speaker that another's line holds)
    (
        "Caroline: I live in Lisbon.\nBob: Caroline: correction, I moved to Paris.",
        "Caroline moved to Paris.",
    ),
    (
        "user: Which editor do you use?\nassistant: I prefer vim for quick edits.",
        "The user prefers vim for quick edits.",
    ),
)


def probe_sources(said: str) -> Sources:
    """A probe's transcript as one interaction; "user" is the user."""
    return Sources.of([(1, DATE, said)], users={"user"})


def _probes() -> Iterator[Sample]:
    """Facts that invert, recombine or misattribute what was said (all to drop), and what was
    said restated (to keep)."""
    for group, probes in (
        ("inverted fact (probe)", INVERSIONS),
        ("swapped fact (probe)", SWAPS),
        ("misattributed fact (probe)", MISATTRIBUTED),
    ):
        for said, fact in probes:
            yield Sample(group, fact, probe_sources(said))
            if said.startswith("user: "):  # in the first person: the user's own words again
                yield Sample("probe said again", said.removeprefix("user: "), probe_sources(said))


def distortion_table() -> list[tuple[str, int, int]]:
    """Per family of distortion probes (bench.distortions), and for the faithful paraphrases
    last: how many probes, and how many the check refuses (distortions) or keeps (faithful)."""
    rows = []
    for family, probes in distortions.DISTORTIONS.items():
        refused = sum(not check(fact, probe_sources(said)).grounded for said, fact in probes)
        rows.append((family, len(probes), refused))
    kept = sum(check(fact, probe_sources(said)).grounded for said, fact in distortions.FAITHFUL)
    return [*rows, ("faithful paraphrase (kept)", len(distortions.FAITHFUL), kept)]


def distortion_markdown() -> str:
    """The distortion table as `make eval` writes it into its report."""
    rows = distortion_table()
    total = sum(n for _, n, _ in rows[:-1])
    refused = sum(c for _, _, c in rows[:-1])
    lines = ["| distortion family | probes | refused |", "|---|---|---|"]
    lines += [f"| {family} | {n} | {c / n:.0%} |" for family, n, c in rows[:-1]]
    lines.append(f"| **all distortions** | {total} | {refused / total:.0%} |")
    _, n, kept = rows[-1]
    lines.append(f"| faithful paraphrases | {n} | {1 - kept / n:.0%} ({kept / n:.0%} kept) |")
    return "\n".join(lines)


def print_distortions() -> None:
    """The distortion table, as `python -m bench.grounding` and `make eval` print it."""
    rows = distortion_table()
    print(f"{'distortion family':<42} {'probes':>6}  {'refused':>7}")
    for family, n, count in rows[:-1]:
        print(f"{family:<42} {n:>6}  {count / n:7.0%}")
    total = sum(n for _, n, _ in rows[:-1])
    print(f"{'all distortions':<42} {total:>6}  {sum(c for _, _, c in rows[:-1]) / total:7.0%}")
    family, n, count = rows[-1]
    print(f"{family:<42} {n:>6}  {count / n:7.0%} kept")


@dataclass(frozen=True)
class Sample:
    """One text, the sources it is checked against, and whether it is a fact or a summary."""

    group: str  # what the rates are reported by
    text: str
    sources: Sources
    summary: bool = False


Session = tuple[list[dict[str, Any]], str]  # its turns and its date (ISO 8601)


def _iso(locomo_date: str) -> str:
    return datetime.strptime(locomo_date, LOCOMO_DATE).isoformat() + "Z"


def locomo_sessions(conversation: dict[str, Any]) -> list[Session]:
    keys = [k for k, v in conversation.items() if k.startswith("session_") and isinstance(v, list)]
    keys.sort(key=lambda k: int(k.split("_")[1]))
    return [(conversation[k], _iso(conversation[f"{k}_date_time"])) for k in keys]


def _sources(turns: list[dict[str, Any]], date: str, extra: str = "") -> Sources:
    """A batch as the distiller sees it: one line per turn with its speaker, and its date."""
    lines = "\n".join(f"{t['speaker']}: {t['text']}" for t in turns)
    return Sources.of([(0, date, f"{lines}\n{extra}")])


def _observations(sample: dict[str, Any]) -> Iterator[tuple[int, str, list[str]]]:
    """Each observation: its session's index, its text and the dialogue ids it cites."""
    for key, by_speaker in sample["observation"].items():
        session = int(key.split("_")[1]) - 1
        for facts in by_speaker.values():
            for text, cited in facts:
                yield session, text, cited if isinstance(cited, list) else [cited]


def _renamer(a: dict[str, Any], b: dict[str, Any]) -> Callable[[str], str]:
    """Puts conversation b's speakers in place of conversation a's in a text."""
    pairs = [(a[k], b[k]) for k in ("speaker_a", "speaker_b")]
    return lambda text: functools.reduce(
        lambda t, p: re.sub(rf"\b{re.escape(p[0])}\b", p[1], t), pairs, text
    )


def _conversation_samples(n: int, data: list[dict[str, Any]]) -> Iterator[Sample]:
    sample, other = data[n], data[(n + 1) % len(data)]
    sessions = locomo_sessions(sample["conversation"])
    elsewhere = locomo_sessions(other["conversation"])
    rename = _renamer(sample["conversation"], other["conversation"])
    speakers = " ".join(sample["conversation"][k] for k in ("speaker_a", "speaker_b"))
    by_id = {t["dia_id"]: t for turns, _ in sessions for t in turns}
    own = [_sources(*session) for session in sessions]  # built once: many samples share each
    other_own = [_sources(*session) for session in elsewhere]
    for s, text, cited in _observations(sample):
        turns = [by_id[i] for i in cited if i in by_id]
        if not turns or s >= len(sessions):
            continue
        yield Sample("gold fact, its batch", text, own[s])
        yield Sample("gold fact, cited turns", text, _sources(turns, sessions[s][1], speakers))
        moved = rename(text)  # the same people, events they never spoke of
        yield Sample("invented fact", moved, other_own[s % len(elsewhere)])
        yield Sample("fact, other session", text, own[(s + len(sessions) // 2) % len(sessions)])
    for key, text in sample["session_summary"].items():
        s = int(key.split("_")[1]) - 1
        if s < len(sessions):
            yield Sample("gold summary", text, own[s], True)
            moved = rename(text)
            yield Sample("invented summary", moved, other_own[s % len(elsewhere)], True)


def samples(data: list[dict[str, Any]]) -> list[Sample]:
    """The calibration set: gold observations and summaries, and invented ones."""
    out = [s for n in range(len(data)) for s in _conversation_samples(n, data)]
    first = locomo_sessions(data[0]["conversation"])[0]
    out += [Sample("invented by a small model", text, _sources(*first)) for text in INVENTED]
    return out + list(_probes())


def calibrate(path: Path) -> dict[str, tuple[int, float]]:
    """Per group of samples: how many, and the share the check keeps."""
    kept: dict[str, list[bool]] = {}
    for s in samples(json.loads(path.read_bytes())):
        kept.setdefault(s.group, []).append(check(s.text, s.sources, summary=s.summary).grounded)
    return {group: (len(oks), sum(oks) / len(oks)) for group, oks in kept.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.grounding", description=__doc__)
    parser.add_argument("--locomo", type=Path, help="locomo10.json (default: found beside us)")
    parser.add_argument(
        "--probes-only", action="store_true", help="only the distortion probes (no LoCoMo)"
    )
    args = parser.parse_args(argv)
    print_distortions()
    if args.probes_only:
        return 0
    path = args.locomo or locomo_path(REPO)
    if path is None or not path.is_file():
        print("LoCoMo not found: pass --locomo PATH", file=sys.stderr)
        return 2
    for group, (n, kept) in calibrate(path).items():
        print(f"{group:<28} {n:>5}  kept {kept:6.1%}  dropped {1 - kept:6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
