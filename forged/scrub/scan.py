"""Secret scrubbing: credentials in text become ``[REDACTED:<kind>]`` before anything stores or sends it.

The rules, their kinds and their anchors live in ``scrub.rules`` (written with the pieces of
``scrub.patterns``, the providers' from ``scrub.providers``). Scrubbing is two passes over a
string: self-identifying formats first, so that a token assigned to a name keeps its own kind
(``api_key=sk-...`` is an ``openai_key``), then credentials known by their context; the second
pass never re-matches the first pass's markers.

Fast path: one prefilter scan over all strings of an interaction flags the few strings, and the
rules, whose anchors match; only those run, as one alternation of the flagged rules. A rule that
matches nowhere in a string changes nothing in an alternation over it, so the output is exactly
that of every rule on every string (``scrub_exact``), which the tests check.

Guarantees: ``scrub(scrub(x)) == scrub(x)``; a marker is never matched again, so markers never
nest; every pattern is compiled once and written so that its work grows linearly with the text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from forged.models import NUL
from forged.scrub import prefilter
from forged.scrub.patterns import ENDINGS_ALTERNATION, MARKER, name_kind
from forged.scrub.rules import CONTEXTS, FORMATS, KINDS, Rule

__all__ = [
    "ANCHORS",
    "KINDS",
    "Scrubber",
    "prepare",
    "redacted",
    "scrub",
    "scrub_all",
    "scrub_exact",
    "secret_key_kind",
]

# Shared first check of every pass: every rule starts with one of these characters, and none
# right after a letter or digit except a PEM block or after an escaped newline or tab of JSON
# text, so most positions fail here once instead of in every alternative.
_GUARD = r"(?=[A-Za-z0-9_.*-])(?:(?<![A-Za-z0-9])|(?<=\\[nrt])|(?=-----))"

# Rules by pass, and each rule's place in the one list the prefilter knows.
_PASSES = (FORMATS, CONTEXTS)
_FIRST = frozenset(range(len(FORMATS)))
ANCHORS = tuple(rule.anchor for rules in _PASSES for rule in rules)

# Metadata keys whose value is a credential: a name that ends like an assignment's (spaces
# read as separators), or one of these words.
_SECRET_KEY = re.compile(rf"[A-Za-z0-9_.-]*(?:{ENDINGS_ALTERNATION})", re.IGNORECASE | re.ASCII)
_SECRET_KEY_WORDS = {
    "auth": "authorization",
    "authorization": "authorization",
    "cookie": "authorization",
    "credential": "secret",
    "credentials": "secret",
    "pwd": "password",
    "pass": "password",
}


def _replacer(rules: tuple[Rule, ...]) -> Callable[[re.Match[str]], str]:
    """Replacement function: the matched secrets become markers, their context stays."""
    by_tag = {rule.tag: rule for rule in rules}

    def replace(match: re.Match[str]) -> str:
        # The wrapping group closes last, so lastgroup names the rule that matched.
        rule = by_tag[match.lastgroup or ""]
        text, offset, at, out = match.group(), match.start(), 0, []
        for group in sorted((g for g in rule.secrets if match.start(g) >= 0), key=match.start):
            kind = rule.kind if isinstance(rule.kind, str) else rule.kind(match, group)
            out += [text[at : match.start(group) - offset], MARKER.format(kind)]
            at = match.end(group) - offset
        return "".join([*out, text[at:]])

    return replace


@functools.lru_cache(maxsize=512)
def _pass(number: int, chosen: frozenset[int]) -> tuple[re.Pattern[str], Callable[..., str]]:
    """The alternation of the chosen rules of a pass (indices into that pass), compiled once."""
    rules = tuple(rule for i, rule in enumerate(_PASSES[number]) if i in chosen)
    alternation = "|".join(f"(?P<{rule.tag}>{rule.pattern})" for rule in rules)
    return re.compile(f"{_GUARD}(?:{alternation})", re.ASCII), _replacer(rules)


def _run(number: int, chosen: frozenset[int], text: str) -> str:
    pattern, replace = _pass(number, chosen)
    return pattern.sub(replace, text)


_EVERY = tuple(frozenset(range(len(rules))) for rules in _PASSES)


def scrub_exact(text: str) -> str:
    """Every rule on the whole text, no prefilter: the reference the fast path must equal."""
    for number, chosen in enumerate(_EVERY):
        text = _run(number, chosen, text)
    return text


class Scrubber:
    """The fast path over one prefilter engine; every engine gives the same output."""

    def __init__(self, engine: prefilter.Prefilter) -> None:
        self.engine = engine

    def _flagged(self, text: str, flags: frozenset[int]) -> str:
        """Scrub until nothing changes: a marker can expose a match that the secret it replaced
        hid ("mysql -pX shopmysql -pY": Y matches only once X is a marker)."""
        for _ in range(MAX_ROUNDS):
            scrubbed = self._once(text, flags)
            if scrubbed == text:
                break
            text, flags = scrubbed, (self.engine.flags([scrubbed]) or [frozenset()])[0]
        return text

    def _once(self, text: str, flags: frozenset[int]) -> str:
        """Both passes, each with only the rules the prefilter flagged."""
        if first := flags & _FIRST:
            scrubbed = _run(0, first, text)
            if scrubbed != text:  # markers are new text: flag the contexts again on it
                text, flags = scrubbed, (self.engine.flags([scrubbed]) or [frozenset()])[0]
        if second := frozenset(i - len(FORMATS) for i in flags - _FIRST):
            text = _run(1, second, text)
        return text

    def scrub_all(self, texts: Sequence[str]) -> list[str]:
        """Scrub many strings (an interaction's) with one prefilter scan over them all."""
        flagged = self.engine.flags(texts)
        if flagged is None:
            return list(texts)
        return [self._flagged(t, f) if f else t for t, f in zip(texts, flagged, strict=True)]


MAX_ROUNDS = 4  # each round redacts more, so few are ever needed

_SCRUBBER: Scrubber | None = None  # built by `prepare`, else on first use


def prepare(cache: Path | None = None) -> Scrubber:
    """Build the scrubber now, once: its prefilter's compiled database read from the `cache`
    directory when that holds one of the same rules, else compiled (and saved there)."""
    global _SCRUBBER
    if _SCRUBBER is None:
        _SCRUBBER = Scrubber(prefilter.best(ANCHORS, cache))
    return _SCRUBBER


def scrub_all(texts: Sequence[str]) -> list[str]:
    """Scrub many strings (an interaction's) with one prefilter scan over them all; a NUL,
    which no store keeps in a text (PostgreSQL refuses it), becomes U+FFFD."""
    return [text.replace(NUL, "\ufffd") for text in prepare().scrub_all(texts)]


def scrub(text: str) -> str:
    """Return text with every secret it recognises replaced by ``[REDACTED:<kind>]`` (and NUL
    by U+FFFD)."""
    return scrub_all([text])[0]


def redacted(kind: str) -> str:
    """The marker that takes the place of a secret of this kind."""
    return MARKER.format(kind)


def secret_key_kind(key: str) -> str | None:
    """The kind of credential a metadata key names (``password``, ``api_key``...), or None."""
    if kind := _SECRET_KEY_WORDS.get(key.lower()):
        return kind
    return name_kind(key) if _SECRET_KEY.fullmatch(key.replace(" ", "_")) else None
