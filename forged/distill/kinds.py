"""Kinds: which one kind a kept line holds, by cue words a reader can predict.

The rules are tried in this order and the first that matches wins, so a line holds one kind:

1. correction: "actually", "no, it's", "I meant", "correction", "not X but", "I was wrong";
2. decision: "let's", "we decided", "I decided", "we'll go with", "we chose", "we agreed";
3. preference: "I prefer", "please ... from now on", "I like", "I love", "I hate", "I enjoy",
   "my favourite", "I'd rather";
4. state: "I moved", "I now", "now I", "I stopped", "I quit", "no longer", "not anymore",
   "I switched", "I started", "I became", "we moved", "we switched";
5. event: a dated happening: a date or time expression (yesterday, last week, 7 May, 2023,
   tonight, ago);
6. profile: anything else, lasting information about a person or thing ("My cat Miso is
   allergic to chicken").
"""

from __future__ import annotations

import re

from forged.models import FactKind
from forged.text.grounding import MONTHS, WEEKDAYS

__all__ = ["RULES", "TIME_WORDS", "kind_of"]

TIME_WORDS = re.compile(  # a date or time expression: what dates a happening
    r"\b(?:yesterday|today|tonight|tomorrow|last|ago|next|week|weekend|month|year|years|"
    rf"recently|lately|since|{'|'.join(MONTHS + WEEKDAYS)}|(?:19|20)\d\d)\b",
    re.IGNORECASE,
)
_PLEASE = re.compile(r"\bplease\b", re.IGNORECASE)  # a preference: "please ... from now on"
_FROM_NOW_ON = re.compile(r"\bfrom now on\b", re.IGNORECASE)
_SUBJECT = r"(?:i|we|i've|we've|i'm|we're)"
RULES: tuple[tuple[FactKind, re.Pattern[str]], ...] = (  # in order: the first match wins
    (
        "correction",
        re.compile(
            r"\b(?:actually|correction|i meant|i was wrong|not \w+ but)\b|\bno, (?:it's|it is)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "decision",
        re.compile(
            rf"\blet's\b|\blet us\b|\b{_SUBJECT} (?:have )?(?:decided|chose|agreed)\b"
            r"|\bwe'll go with\b|\bwe will go with\b|\bi'll go with\b|\bgoing with\b",
            re.IGNORECASE,
        ),
    ),
    (
        "preference",
        re.compile(
            r"\bi(?:'d| would)? (?:really )?"
            r"(?:prefer|like|love|hate|enjoy|rather)\b|\bmy favou?rite\b",
            re.IGNORECASE,
        ),
    ),
    (
        "state",
        re.compile(
            rf"\b{_SUBJECT} (?:just )?(?:now|moved|stopped|quit|switched|started|became)\b"
            r"|\bnow i\b|\bno longer\b|\bnot \w+ anymore\b|\bany ?more\b",
            re.IGNORECASE,
        ),
    ),
    ("event", TIME_WORDS),
)


def _asks_from_now_on(text: str) -> bool:
    """Whether a line says "please ... from now on": the first "please" of each line, then one
    search after it (a pattern `please.*from now on` rescans the line from every "please")."""
    return any(
        (m := _PLEASE.search(line)) is not None and _FROM_NOW_ON.search(line, m.end()) is not None
        for line in text.split("\n")
    )


def kind_of(text: str) -> FactKind:
    """The one kind a line holds (see the module docstring)."""
    for kind, cue in RULES:
        if cue.search(text) or (kind == "preference" and _asks_from_now_on(text)):
            return kind
    return "profile"
