"""Prefilter: in one scan, which strings may hold a match of which secret rule.

Every rule has an anchor that all its matches contain (see ``scrub_rules``), so a string where
no anchor matches needs no exact regex at all: that is nearly every string of a conversation.
Hyperscan matches all anchors at once over an interaction's strings joined; without it (a
platform with no wheel) a pure-stdlib prefilter gives the same flags, more slowly. Both only
ever flag too much, never too little, so the scrubbed output does not depend on which one runs.
"""

from __future__ import annotations

import bisect
import re
import threading
from collections.abc import Sequence
from typing import Any, Protocol

# Between joined strings: no anchor needs to match across it, and a match that spans it only
# flags a string more, which costs an exact scan and changes nothing.
_SEPARATOR = "\n"
_NOTHING: frozenset[int] = frozenset()


class Prefilter(Protocol):
    """Flags, for each string, the indices of the rules whose anchor matches in it.

    ``flags`` returns None when no anchor matches in any string: the common case, kept cheap.
    """

    name: str

    def flags(self, texts: Sequence[str]) -> list[frozenset[int]] | None: ...


class StdlibPrefilter:
    """One regex of all anchors decides whether anything is flagged; then each anchor alone."""

    name = "stdlib"

    def __init__(self, anchors: Sequence[str]) -> None:
        self._any = re.compile("|".join(f"(?:{a})" for a in anchors), re.IGNORECASE | re.ASCII)
        self._each = [re.compile(a, re.IGNORECASE | re.ASCII) for a in anchors]

    def flags(self, texts: Sequence[str]) -> list[frozenset[int]] | None:
        if self._any.search(_SEPARATOR.join(texts)) is None:
            return None
        return [self._flag(text) for text in texts]

    def _flag(self, text: str) -> frozenset[int]:
        if self._any.search(text) is None:
            return _NOTHING
        return frozenset(i for i, anchor in enumerate(self._each) if anchor.search(text))


class HyperscanPrefilter:
    """All anchors in one Hyperscan database, scanned once over the strings joined."""

    name = "hyperscan"

    def __init__(self, anchors: Sequence[str], hyperscan: Any) -> None:
        self._hs = hyperscan
        self._db = hyperscan.Database()
        self._db.compile(
            expressions=[a.encode() for a in anchors],
            ids=list(range(len(anchors))),
            flags=[hyperscan.HS_FLAG_CASELESS] * len(anchors),
        )
        self._scratch = hyperscan.Scratch(self._db)
        self._owner = threading.get_ident()  # a scan needs its own scratch space in every thread
        self._local = threading.local()

    def _thread_scratch(self) -> Any:
        if threading.get_ident() == self._owner:
            return self._scratch
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = self._scratch.clone()
        return scratch

    def flags(self, texts: Sequence[str]) -> list[frozenset[int]] | None:
        joined = _SEPARATOR.join(texts)
        data = joined.encode("utf-8", "surrogatepass")
        hits: list[tuple[int, int]] = []
        self._db.scan(data, _collect, context=hits, scratch=self._thread_scratch())
        if not hits:
            return None
        starts = _byte_starts(texts, ascii_only=len(data) == len(joined))
        found: list[set[int]] = [set() for _ in texts]
        for end, rule in hits:  # a match belongs to the string it ends in
            found[bisect.bisect_right(starts, max(end - 1, 0)) - 1].add(rule)
        return [frozenset(rules) if rules else _NOTHING for rules in found]


def _collect(rule: int, _start: int, end: int, _flags: int, hits: list[tuple[int, int]]) -> None:
    """Hyperscan's match callback: note where a rule's anchor ended."""
    hits.append((end, rule))


def _byte_starts(texts: Sequence[str], *, ascii_only: bool) -> list[int]:
    """Offset of each string in the joined, encoded buffer."""
    starts, offset = [], 0
    for text in texts:
        starts.append(offset)
        offset += (len(text) if ascii_only else len(text.encode("utf-8", "surrogatepass"))) + 1
    return starts


def best(anchors: Sequence[str]) -> Prefilter:
    """Hyperscan when it can be imported, else the stdlib prefilter."""
    try:
        import hyperscan  # optional: a platform without a wheel still scrubs
    except ImportError:
        return StdlibPrefilter(anchors)
    return HyperscanPrefilter(anchors, hyperscan)
