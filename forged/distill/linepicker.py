"""A distiller without a model: it keeps the transcript lines that say something specific.

The baseline that shows what a model adds (`[distiller] class = "forged.distill.linepicker:LinePicker"`).
A line is kept when it is not a question and holds at least MIN_CONTENT_WORDS content words,
or fewer but a name, a number or a date; its kind comes from cue words (see KIND_CUES), else
`profile`. Kept lines are stored verbatim, like every extractive distiller's.
"""

from __future__ import annotations

import re
import time

from forged.config import DistillerConfig
from forged.llm.prompt import LINE_ID
from forged.models import DistilledMemory, FactKind, LinePick, Usage
from forged.text.grounding import MONTHS, WEEKDAYS, claim

__all__ = ["KIND_CUES", "MIN_CONTENT_WORDS", "MIN_SPECIFIC_WORDS", "LinePicker", "pick_lines"]

MIN_CONTENT_WORDS = 5  # a line with fewer says little, unless it names someone or a date
MIN_SPECIFIC_WORDS = 3  # ... and a line with a name, number or date needs at least these
KIND_CUES: tuple[tuple[FactKind, re.Pattern[str]], ...] = (  # the first that matches wins
    ("correction", re.compile(r"\b(?:actually|instead|correction|i meant|not \w+ but)\b", re.I)),
    ("decision", re.compile(r"\b(?:decided?|let's|we'll|i'll|going to|plan to|chose)\b", re.I)),
    ("preference", re.compile(r"\b(?:prefer\w*|love|like|favou?rite|enjoy\w*|hate)\b", re.I)),
    (
        "event",
        re.compile(
            rf"\b(?:yesterday|today|tonight|last|ago|weekend|went|did|{'|'.join(MONTHS + WEEKDAYS)})\b",
            re.I,
        ),
    ),
    ("state", re.compile(r"\b(?:now|moved|started|switched|became|no longer)\b", re.I)),
)
_LINE = re.compile(LINE_ID.pattern + r"(.*)$", re.MULTILINE)  # [seq.line] speaker: text


def _kind(text: str) -> FactKind:
    return next((kind for kind, cue in KIND_CUES if cue.search(text)), "profile")


def _worth_keeping(text: str) -> bool:
    if text.rstrip().endswith("?"):
        return False
    said = claim(text)
    specific = bool(said.names or said.numbers or said.years) or any(
        w.casefold() in MONTHS or w.casefold() in WEEKDAYS for w in text.split()
    )
    return len(said.words) >= (MIN_SPECIFIC_WORDS if specific else MIN_CONTENT_WORDS)


def pick_lines(transcript: str, limit: int) -> list[LinePick]:
    """The lines of a rendered transcript worth keeping, at most `limit`, in order."""
    picks: dict[tuple[int, int], LinePick] = {}
    for m in _LINE.finditer(transcript):
        text = m.group(3).split(": ", 1)[-1]  # without the speaker
        if _worth_keeping(text):
            key = (int(m.group(1)), int(m.group(2)))
            picks.setdefault(key, LinePick(*key, _kind(text)))
    return list(picks.values())[:limit]


class LinePicker:
    """The no-model extractive distiller."""

    def __init__(self, config: DistillerConfig) -> None:
        self.config = config
        self.model = "line-picker"

    async def distill(self, transcript: str, *, attempt: int = 1) -> DistilledMemory:
        started = time.perf_counter()
        picks = pick_lines(transcript, self.config.max_facts)
        spent = Usage(ms=round((time.perf_counter() - started) * 1000))  # what a batch costs
        return DistilledMemory("", [], spent, picks)
