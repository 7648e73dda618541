"""A model's answer, read: the JSON object in its content, decoded into the shape asked for,
checked and capped to the configured sizes. An answer is data, never instructions.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from forged.config import DistillerConfig
from forged.errors import InvalidAnswer
from forged.models import FACT_KINDS, Fact, LinePick, Usage, stored_count

__all__ = ["decode_answer", "extract_json", "parse_answer", "parse_picks"]

_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)
RAW_CHARS = 65536  # bytes of an undecodable body kept as its raw text
_CONTROL = re.compile(r"[\x00-\x1f]")  # raw newlines and tabs small models put inside strings
_LINE = re.compile(r"^\[?([0-9]{1,18})\.([0-9]{1,9})\]?$", re.ASCII)  # a picked line: 12.3
_ID = re.compile(
    r"[0-9]{1,18}", re.ASCII
)  # a fact id a model quoted: ASCII digits only ("²" is not)
MAX_ID = 2**63 - 1  # ids are 64-bit integers in both stores; a larger one names no fact
MAX_REPLACES = 8  # ids one fact may name; more is not a correction but a sweep
# What decoding an answer may raise besides msgspec's own errors: deep nesting (RecursionError),
# integers past 64 bits (OverflowError, ValueError) and values of the wrong type (TypeError).
_DECODE_FAILURES = (
    msgspec.ValidationError,
    msgspec.DecodeError,
    RecursionError,
    ValueError,
    OverflowError,
    TypeError,
)
T = TypeVar("T")


class _RawFact(msgspec.Struct):
    kind: str
    text: str
    replaces: list[Any] = []


class _Answer(msgspec.Struct):
    summary: str
    facts: list[_RawFact] = []


class _RawPick(msgspec.Struct):
    line: str
    kind: str
    replaces: list[Any] = []


class _Picks(msgspec.Struct):
    lines: list[_RawPick]


def extract_json(content: str) -> str:
    """The JSON object in an answer: bare, in markdown fences, or inside surrounding prose."""
    text = content.strip()
    if text.startswith("{"):
        return text
    if m := _FENCE.search(text):
        return m.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start == -1 or end < start:
        raise InvalidAnswer("the answer holds no JSON object", raw=content)
    return text[start : end + 1]


def decoded(data: str | bytes, shape: type[T], what: str, raw: str | None = None) -> T:
    """The one place a model's JSON becomes a value: `data` as `shape`, or InvalidAnswer saying
    it is not `what`, whatever the decoder raised (so retries, splits and dead letters follow)."""
    try:
        return msgspec.json.decode(_without_nul(data), type=shape)
    except _DECODE_FAILURES as exc:
        problem = str(exc) if not isinstance(exc, RecursionError) else "nested too deeply"
        text = raw if raw is not None else _text(data)
        raise InvalidAnswer(f"the answer is not {what}: {problem}", raw=text) from None


def _without_nul(data: str | bytes) -> str | bytes:
    """JSON spells NUL in a string only as \\u0000, and no store keeps NUL in a text
    (PostgreSQL refuses it): it is read as U+FFFD. (A backslash written before "u0000" in a
    string is read so too: harmless.)"""
    if isinstance(data, bytes):
        return data.replace(rb"\u0000", rb"\ufffd")
    return data.replace("\\u0000", "\\ufffd")


def _text(data: str | bytes) -> str:
    return data if isinstance(data, str) else data[:RAW_CHARS].decode("utf-8", "replace")


def count(value: Any) -> int:
    """A token count an answer reports (any JSON value), as forged stores it: an int in
    0..MAX_COUNT; what is no number counts 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 0
    return stored_count(int(max(-1.0, min(value, 2.0**31))))


def decode_answer(content: str, usage: Usage, shape: type[T], what: str) -> T:
    """An answer as `shape`, or InvalidAnswer that says it is not `what` and carries its cost."""
    try:
        return decoded(extract_json(content), shape, what, raw=content)
    except InvalidAnswer as exc:
        exc.usage = usage
        raise


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _decode(content: str, shape: type[T]) -> T:
    # A control character is never valid JSON; as a space it is harmless inside and outside strings.
    text = _CONTROL.sub(" ", extract_json(content))
    return decoded(text, shape, "valid memory", raw=content)


def _ids(values: list[Any]) -> list[int]:
    """The fact ids in a `replaces` list: integers, or ASCII digits a model quoted; at most
    MAX_REPLACES of them."""
    ids = [i for i in map(_id, values) if i is not None]
    return list(dict.fromkeys(ids))[:MAX_REPLACES]


def _id(value: Any) -> int | None:
    """The fact id a value names, or None: a bool, a superscript, a float or 2**70 names none."""
    if isinstance(value, str) and _ID.fullmatch(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 < value <= MAX_ID else None


def parse_picks(content: str, config: DistillerConfig) -> list[LinePick]:
    """Validate an extractive answer: picks of an unknown kind or a malformed id are dropped."""
    picks: dict[tuple[int, int], LinePick] = {}
    for pick in _decode(content, _Picks).lines:
        if (m := _LINE.match(pick.line.strip())) and pick.kind in FACT_KINDS:
            seq, line = int(m.group(1)), int(m.group(2))
            replaces = tuple(_ids(pick.replaces))
            picks.setdefault((seq, line), LinePick(seq, line, pick.kind, replaces))  # type: ignore[arg-type]
    return list(picks.values())[: config.max_facts]


def parse_answer(content: str, config: DistillerConfig) -> tuple[str, list[Fact]]:
    """Validate an answer and cap it: facts with no text or an unknown kind are dropped."""
    answer = _decode(content, _Answer)
    facts = [
        Fact(kind=f.kind, text=_clip(f.text, config.max_fact_chars), replaces=_ids(f.replaces))  # type: ignore[arg-type]
        for f in answer.facts
        if f.text.strip() and f.kind in FACT_KINDS
    ]
    return _clip(answer.summary, config.max_summary_chars), facts[: config.max_facts]
