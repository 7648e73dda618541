"""A model's answer, read: the JSON object in its content, decoded into the shape asked for,
checked and capped to the configured sizes. An answer is data, never instructions.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from forged.config import DistillerConfig
from forged.errors import InvalidAnswer
from forged.models import FACT_KINDS, Fact, LinePick, Usage

_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)
_CONTROL = re.compile(r"[\x00-\x1f]")  # raw newlines and tabs small models put inside strings
_LINE = re.compile(r"^\[?(\d{1,18})\.(\d{1,9})\]?$")  # a picked line's id: 12.3 (or [12.3])
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


def decode_answer(content: str, usage: Usage, shape: type[T], what: str) -> T:
    """An answer as `shape`, or InvalidAnswer that says it is not `what` and carries its cost."""
    try:
        return msgspec.json.decode(extract_json(content), type=shape)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidAnswer(f"the answer is not {what}: {exc}", raw=content,
                            usage=usage) from exc  # fmt: skip
    except InvalidAnswer as exc:
        exc.usage = usage
        raise


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _decode(content: str, shape: type[T]) -> T:
    # A control character is never valid JSON; as a space it is harmless inside and outside strings.
    text = _CONTROL.sub(" ", extract_json(content))
    try:
        return msgspec.json.decode(text, type=shape)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidAnswer(f"the answer is not valid memory: {exc}", raw=content) from exc


def _ids(values: list[Any]) -> list[int]:
    """The fact ids in a `replaces` list: integers, or digits a model quoted."""
    ids = (v if isinstance(v, int) else int(v) for v in values if _is_id(v))
    return list(dict.fromkeys(ids))


def _is_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (
        isinstance(value, str) and value.isdigit() and len(value) < 19
    )


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
