"""The offline distiller: no model; it keeps a transcript's salient lines, verbatim.

`[distiller] class = "forged.distill.offline:OfflineDistiller"`, which `forged serve --offline` (and
`make run` without a distiller URL) uses. Every line gets forged.distill.salience's score, beside the
lines around it and the scope's facts shown with the transcript; a line scoring `KEEP_AT` or
more is kept, with the one kind forged.distill.kinds gives it. The summary is the batch's few most
salient kept lines, in the order said, so it is never a greeting. What is stored is the
transcript's own words.
"""

from __future__ import annotations

import re
import time

import trio

from forged.config import DistillerConfig
from forged.distill.kinds import kind_of
from forged.distill.salience import KEEP_AT, Line, scores, words_of
from forged.llm.prompt import KNOWN_ID, LINE_ID
from forged.models import DistilledMemory, LinePick, Usage

__all__ = ["SUMMARY_LINES", "OfflineDistiller", "distil"]

SUMMARY_LINES = 3  # kept lines a summary holds: a session's few most salient
_LINE = re.compile(LINE_ID.pattern + r"(.*)$", re.MULTILINE)  # [seq.line] speaker: text
_KNOWN = re.compile(KNOWN_ID.pattern + r"\([^)]*\) (.*)$", re.MULTILINE)  # [fact N] (kind, date)


def _lines(transcript: str) -> list[tuple[tuple[int, int], Line]]:
    """The transcript's numbered lines, each with its id, once (a chunk may repeat none)."""
    found: dict[tuple[int, int], Line] = {}
    for m in _LINE.finditer(transcript):
        who, _, text = m.group(3).partition(": ")
        found.setdefault((int(m.group(1)), int(m.group(2))), Line.of(who, text))
    return list(found.items())


def _known_words(transcript: str) -> set[str]:
    """The content words of the scope's facts shown before the transcript."""
    return {w for m in _KNOWN.finditer(transcript) for w in words_of(Line.of("", m.group(2)))}


def distil(transcript: str, limit: int) -> DistilledMemory:
    """The kept lines of a rendered transcript (at most `limit`, the best when more) and its
    summary."""
    lines = _lines(transcript)
    points = scores([line for _, line in lines], _known_words(transcript))
    kept = [i for i, p in enumerate(points) if p >= KEEP_AT]
    kept = sorted(sorted(kept, key=lambda i: -points[i])[:limit])
    picks = [LinePick(*lines[i][0], kind_of(lines[i][1].text)) for i in kept]
    best = sorted(sorted(kept, key=lambda i: -points[i])[:SUMMARY_LINES])
    summary = "\n".join(f"{lines[i][1].speaker}: {lines[i][1].text}" for i in best)
    return DistilledMemory(summary, [], picks=picks)


class OfflineDistiller:
    """The no-model distiller `make run` starts by default."""

    def __init__(self, config: DistillerConfig) -> None:
        self.config = config
        self.model = "offline"

    async def distill(self, transcript: str, *, attempt: int = 1) -> DistilledMemory:
        started = time.perf_counter()
        # CPU work on untrusted text, bounded by the batch's size: off the event loop
        memory = await trio.to_thread.run_sync(distil, transcript, self.config.max_facts)
        memory.usage = Usage(ms=round((time.perf_counter() - started) * 1000))
        return memory
