"""Prefilter: in one scan, which strings may hold a match of which secret rule.

Every rule has an anchor that all its matches contain (see ``scrub.rules``), so a string where
no anchor matches needs no exact regex at all: that is nearly every string of a conversation.
Hyperscan matches all anchors at once over an interaction's strings joined; without it (a
platform with no wheel) a pure-stdlib prefilter gives the same flags, more slowly. Both only
ever flag too much, never too little, so the scrubbed output does not depend on which one runs.

Compiling the Hyperscan database takes a second or more, at every start; given a cache directory,
the compiled database is saved there and read back by the next start of the same rules.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import re
import tempfile
import threading
from collections.abc import Iterator, Sequence
from itertools import accumulate, count
from operator import add
from pathlib import Path
from typing import Any, Protocol

__all__ = ["HyperscanPrefilter", "Prefilter", "StdlibPrefilter", "best", "cache_path"]

# Between joined strings: no anchor needs to match across it, and a match that spans it only
# flags a string more, which costs an exact scan and changes nothing.
_SEPARATOR = "\n"
_NOTHING: frozenset[int] = frozenset()
# Bytes that start a UTF-8 character (all but continuation bytes 0x80-0xBF).
_CHARACTER_STARTS = bytes([*range(0x80), *range(0xC0, 0x100)])

# The standard library's regex parser (private, so read defensively) and the node types of its
# parse trees, read to find an anchor's literals.
_PARSER: Any = getattr(re, "_parser", None)
_LITERAL, _SUBPATTERN, _BRANCH = (
    getattr(_PARSER, n, None) for n in ("LITERAL", "SUBPATTERN", "BRANCH")
)


_MAX_LEADS = 512  # spelled-out starts of one anchor at most; past that its parts are used
_DIGEST = hashlib.sha256().digest_size  # a saved database starts with the SHA-256 of the rest


class Prefilter(Protocol):
    """Flags, for each string, the indices of the rules whose anchor matches in it.

    ``flags`` returns None when no anchor matches in any string: the common case, kept cheap.
    """

    name: str

    def flags(self, texts: Sequence[str]) -> list[frozenset[int]] | None: ...


def _leads(items: list[Any]) -> set[str]:
    """The literal texts a parsed pattern can start with, its alternatives spelled out."""
    lead = ""
    for k, (op, av) in enumerate(items):
        if op is _LITERAL:
            lead += chr(av).lower()
            continue
        rest = items[k + 1 :]
        if op is _BRANCH:
            alternatives = [[*branch, *rest] for branch in av[1]]
        elif op is _SUBPATTERN:
            alternatives = [[*av[-1], *rest]]
        else:
            break
        spelled = {lead + tail for alternative in alternatives for tail in _leads(alternative)}
        return spelled if len(spelled) <= _MAX_LEADS else {lead}
    return {lead}


def _needles(items: list[Any]) -> frozenset[str] | None:
    """Lower-case literals of which every match of a parsed pattern holds one, or None."""
    leads = _leads(items)
    options = [frozenset(leads)] if "" not in leads else []
    run = ""
    for op, av in [*items, (None, None)]:
        if op is _LITERAL:
            run += chr(av).lower()
            continue
        if run:
            options.append(frozenset([run]))
        run = ""
        if op is _SUBPATTERN and (inner := _needles(list(av[-1]))):
            options.append(inner)
        elif op is _BRANCH:
            alternatives = [_needles(list(branch)) for branch in av[1]]
            if all(alternatives):
                options.append(frozenset().union(*alternatives))  # type: ignore[arg-type]
    # The best choice: the shortest needle as long as can be, then the fewest needles.
    return min(options, key=lambda o: (-min(map(len, o)), len(o))) if options else None


def _anchor_needles(anchor: str) -> frozenset[str] | None:
    """The needles of an anchor; None (always run its regex) if the parser cannot tell."""
    try:
        return _needles(list(_PARSER.parse(anchor, re.IGNORECASE | re.ASCII)))
    except Exception:  # a private parser: if it ever changes, fall back to the regex alone
        return None


class StdlibPrefilter:
    """Literal needles of every anchor, found with ``in``, pick the anchors worth running."""

    name = "stdlib"

    def __init__(self, anchors: Sequence[str]) -> None:
        self._each = [re.compile(a, re.IGNORECASE | re.ASCII) for a in anchors]
        needles = [_anchor_needles(a) for a in anchors]
        words = sorted({word for found in needles if found for word in found})
        self._rules_of = {
            word: frozenset(i for i, found in enumerate(needles) if found and word in found)
            for word in words
        }
        self._always = frozenset(i for i, found in enumerate(needles) if found is None)

    def flags(self, texts: Sequence[str]) -> list[frozenset[int]] | None:
        everything = _SEPARATOR.join(texts).lower()
        present = [rules for word, rules in self._rules_of.items() if word in everything]
        candidates = self._always.union(*present)
        if not candidates:
            return None
        found = [frozenset(i for i in candidates if self._each[i].search(t)) for t in texts]
        return found if any(found) else None


def _compiled(anchors: Sequence[str], hyperscan: Any) -> Any:
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    database.compile(
        expressions=[a.encode() for a in anchors],
        ids=list(range(len(anchors))),
        flags=[hyperscan.HS_FLAG_CASELESS] * len(anchors),
    )
    return database


def cache_path(anchors: Sequence[str], hyperscan: Any, cache: Path) -> Path:
    """The file of the database of these anchors in `cache`: named by what it was compiled from."""
    made_of = [hyperscan.__version__, hyperscan.HS_MODE_BLOCK, hyperscan.HS_FLAG_CASELESS, *anchors]
    key = hashlib.sha256("\0".join(map(str, made_of)).encode()).hexdigest()[:32]
    return cache / f"prefilter-{key}.hsdb"


def _load(path: Path, hyperscan: Any) -> Any | None:
    """The database saved at `path`; None when absent, damaged or built for another machine."""
    try:
        saved = path.read_bytes()
    except OSError:
        return None
    digest, payload = saved[:_DIGEST], saved[_DIGEST:]
    if hashlib.sha256(payload).digest() != digest:
        return None
    try:
        return hyperscan.loadb(payload, mode=hyperscan.HS_MODE_BLOCK)
    except hyperscan.error:  # a platform or library the database was not compiled for
        return None


def _save(path: Path, database: Any, hyperscan: Any) -> None:
    """Write the database whole or not at all (other processes may read or write it meanwhile);
    a cache that cannot be written only means compiling again next time."""
    payload = hyperscan.dumpb(database)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".prefilter-")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(hashlib.sha256(payload).digest() + payload)
        os.replace(temporary, path)
    except OSError:  # a full disk, say: no half-written file is left behind
        Path(temporary).unlink(missing_ok=True)


def _database(anchors: Sequence[str], hyperscan: Any, cache: Path | None) -> Any:
    """The compiled database of the anchors: from the cache when it holds a sound one."""
    if cache is None:
        return _compiled(anchors, hyperscan)
    path = cache_path(anchors, hyperscan, cache)
    database = _load(path, hyperscan)
    if database is None:
        database = _compiled(anchors, hyperscan)
        _save(path, database, hyperscan)
    return database


class HyperscanPrefilter:
    """All anchors in one Hyperscan database, scanned once over the strings joined."""

    name = "hyperscan"

    def __init__(self, anchors: Sequence[str], hyperscan: Any, cache: Path | None = None) -> None:
        self._db = _database(anchors, hyperscan, cache)
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
        found: dict[int, set[int]] = {}
        for index, rule in _owners(texts, data, hits, ascii_only=len(data) == len(joined)):
            found.setdefault(index, set()).add(rule)
        flags = [_NOTHING] * len(texts)  # per string only what C does: batches hold thousands
        for index, rules in found.items():
            flags[index] = frozenset(rules)
        return flags


def _collect(rule: int, _start: int, end: int, _flags: int, hits: list[tuple[int, int]]) -> None:
    """Hyperscan's match callback: note where a rule's anchor ended."""
    hits.append((end, rule))


def _owners(
    texts: Sequence[str], data: bytes, hits: list[tuple[int, int]], *, ascii_only: bool
) -> Iterator[tuple[int, int]]:
    """For each hit, the string its last byte is in (a match belongs to the string it ends in).

    Byte offsets become character offsets by counting the UTF-8 bytes that start a character,
    between one hit and the next; the strings' starts are character offsets in the joined text.
    """
    starts = list(map(add, accumulate(map(len, texts), initial=0), count()))  # + separators
    read, chars = 0, 0
    for end, rule in sorted(hits):
        last = max(end - 1, 0)
        if not ascii_only:
            chunk = data[read : last + 1]
            chars += len(chunk) - len(chunk.translate(None, _CHARACTER_STARTS))
            read, last = last + 1, chars - 1
        yield bisect.bisect_right(starts, last) - 1, rule


def best(anchors: Sequence[str], cache: Path | None = None) -> Prefilter:
    """Hyperscan when it can be imported (its database kept in `cache`), else the stdlib one."""
    try:
        import hyperscan  # optional: a platform without a wheel still scrubs
    except ImportError:
        return StdlibPrefilter(anchors)
    return HyperscanPrefilter(anchors, hyperscan, cache)
