"""Sentences: a text cut where one sentence ends and the next begins, each kept as written."""

from __future__ import annotations

import re

__all__ = ["sentences"]

_SENTENCE_END = re.compile(r"[.!?][\"'\u201d)]*(?=\s+[\"'\u201c(]*[A-Z0-9])")  # what ends one


def sentences(text: str) -> list[str]:
    """The text's sentences, each as written (a closing quote with its sentence)."""
    out, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        out.append(text[start : m.end()].strip())
        start = m.end()
    out.append(text[start:].strip())
    return [s for s in out if s]
