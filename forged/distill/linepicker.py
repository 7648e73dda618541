"""A distiller without a model: it keeps the transcript lines that say something specific.

The baseline that shows what a model adds (`[distiller] class = "forged.distill.linepicker:LinePicker"`).
A line is kept when it is not a question and holds at least MIN_CONTENT_WORDS content words,
or fewer but a name, a number or a date; its kind is the one forged.distill.kinds gives it,
as the offline distiller's is. Kept lines are stored verbatim, like every extractive distiller's.
"""

from __future__ import annotations

import re
import time

from forged.config import DistillerConfig
from forged.distill.kinds import kind_of
from forged.llm.prompt import LINE_ID
from forged.models import DistilledMemory, LinePick, Usage
from forged.text.grounding import MONTHS, WEEKDAYS, claim
from forged.text.offload import WorkerProcess

__all__ = ["MIN_CONTENT_WORDS", "MIN_SPECIFIC_WORDS", "LinePicker", "pick_lines"]

MIN_CONTENT_WORDS = 5  # a line with fewer says little, unless it names someone or a date
MIN_SPECIFIC_WORDS = 3  # ... and a line with a name, number or date needs at least these
_LINE = re.compile(LINE_ID.pattern + r"(.*)$", re.MULTILINE)  # [seq.line] speaker: text


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
            picks.setdefault(key, LinePick(*key, kind_of(text)))
    return list(picks.values())[:limit]


class LinePicker:
    """The no-model extractive distiller."""

    def __init__(self, config: DistillerConfig) -> None:
        self.config = config
        self.model = "line-picker"
        self.worker = WorkerProcess()  # picking reads untrusted text: off the event loop

    async def distill(self, transcript: str, *, attempt: int = 1) -> DistilledMemory:
        started = time.perf_counter()
        picks = await self.worker.run(pick_lines, transcript, self.config.max_facts)
        spent = Usage(ms=round((time.perf_counter() - started) * 1000))  # what a batch costs
        return DistilledMemory("", [], spent, picks)
