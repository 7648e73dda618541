"""The offline distiller: no model; it keeps what a transcript says worth keeping, verbatim.

`[distiller] class = "forged.distill.offline:OfflineDistiller"`, which `forged serve --offline` (and
`make run` without a distiller URL) uses. Between people, every line gets forged.distill.salience's
score, beside the lines around it and the scope's facts shown with the transcript; a line
scoring `KEEP_AT` or more is kept, with the one kind forged.distill.kinds gives it. In a chat
with an assistant, forged.distill.chat says what is kept: the user's statements, sentence by
sentence, and of the assistant only what records a decision or a result or what the user
accepted; the best `limit` by the same score. A user's statement that restates a known
fact's subject with a changed value is a state that replaces it (forged.recall.updates). The summary says what the kept lines were about
(forged.distill.topics). What is stored is the transcript's own words.
"""

from __future__ import annotations

import re
import time

from forged.config import DistillerConfig
from forged.distill import chat, topics
from forged.distill.kinds import kind_of
from forged.distill.salience import KEEP_AT, Line, scores, words_of
from forged.llm.prompt import KNOWN_ID, LINE_ID
from forged.models import DistilledMemory, Fact, LinePick, Usage
from forged.recall.updates import restates
from forged.text.offload import WorkerProcess

__all__ = ["OfflineDistiller", "distil"]

_LINE = re.compile(LINE_ID.pattern + r"(.*)$", re.MULTILINE)  # [seq.line] speaker: text
_KNOWN = re.compile(KNOWN_ID.pattern + r"\([^)]*\) (.*)$", re.MULTILINE)  # [fact N] (kind, date)
_PART = re.compile(r'^<interaction [^>\n]* part="', re.MULTILINE)  # a chunk of a long interaction


def _lines(transcript: str) -> list[tuple[tuple[int, int], Line]]:
    """The transcript's numbered lines, each with its id, once (a chunk may repeat none)."""
    found: dict[tuple[int, int], Line] = {}
    for m in _LINE.finditer(transcript):
        who, _, text = m.group(3).partition(": ")
        found.setdefault((int(m.group(1)), int(m.group(2))), Line.of(who, text))
    return list(found.items())


def _known_facts(transcript: str) -> list[tuple[int, str]]:
    """The scope's facts shown before the transcript: each its id and text."""
    return [(int(m.group(1)), m.group(2)) for m in _KNOWN.finditer(transcript)]


def _known_words(transcript: str) -> set[str]:
    """The content words of the scope's facts shown before the transcript."""
    return {w for m in _KNOWN.finditer(transcript) for w in words_of(Line.of("", m.group(2)))}


def _best(points: list[float], eligible: list[int], limit: int) -> list[int]:
    """The `limit` best of the eligible indexes by points, in the order said."""
    return sorted(sorted(eligible, key=lambda i: -points[i])[:limit])


def _fact(kept: chat.Kept, known: list[tuple[int, str]]) -> Fact:
    """A kept statement as a fact: a user's restating a known fact's subject with a changed
    value (forged.recall.updates) is a state that replaces it."""
    kind = "decision" if kept.accepted else kind_of(kept.text)
    replaced = [] if kept.accepted else [n for n, text in known if restates(kept.text, text)]
    return Fact("state" if replaced else kind, f"{kept.speaker}: {kept.text}", replaces=replaced)


def _chat(
    lines: list[tuple[tuple[int, int], Line]], transcript: str, limit: int
) -> DistilledMemory:
    """A chat with an assistant: forged.distill.chat's statements, the best `limit`, as facts."""
    keep = chat.kept(lines)
    points = scores([Line.of(k.speaker, k.text) for k in keep], _known_words(transcript))
    best = [keep[i] for i in _best(points, list(range(len(keep))), limit)]
    known = _known_facts(transcript)
    facts = [_fact(k, known) for k in best]
    people = [k.speaker for k in best if k.speaker not in chat.ASSISTANT_SPEAKERS]
    said = [k.text for k in best if k.speaker not in chat.ASSISTANT_SPEAKERS]
    return DistilledMemory(topics.summary(people, said), facts)


def distil(transcript: str, limit: int) -> DistilledMemory:
    """The kept lines of a rendered transcript (at most `limit`, the best when more) and its
    summary."""
    lines = _lines(transcript)
    if chat.is_chat([line.speaker for _, line in lines], bool(_PART.search(transcript))):
        return _chat(lines, transcript, limit)
    points = scores([line for _, line in lines], _known_words(transcript))
    kept = _best(points, [i for i, p in enumerate(points) if p >= KEEP_AT], limit)
    picks = [LinePick(*lines[i][0], kind_of(lines[i][1].text)) for i in kept]
    summary = topics.summary([lines[i][1].speaker for i in kept], [lines[i][1].text for i in kept])
    return DistilledMemory(summary, [], picks=picks)


class OfflineDistiller:
    """The no-model distiller `make run` starts by default."""

    def __init__(self, config: DistillerConfig) -> None:
        self.config = config
        self.model = "offline"
        self.worker = WorkerProcess()

    async def distill(self, transcript: str, *, attempt: int = 1) -> DistilledMemory:
        started = time.perf_counter()
        # CPU work on untrusted text: in a worker process, stopped at its deadline (CheckOverrun)
        memory = await self.worker.run(distil, transcript, self.config.max_facts)
        memory.usage = Usage(ms=round((time.perf_counter() - started) * 1000))
        return memory
