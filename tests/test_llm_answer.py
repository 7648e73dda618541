"""Reading a model's answer: JSON found in its content, decoded, checked and capped."""

from __future__ import annotations

import json

import msgspec
import pytest

from forged.config import DistillerConfig
from forged.errors import InvalidAnswer
from forged.llm_answer import decode_answer, extract_json, parse_answer
from forged.models import Fact, Usage


class _Summary(msgspec.Struct):
    summary: str


@pytest.mark.parametrize(
    "content",
    ['{"summary": "S."}', '```json\n{"summary": "S."}\n```', 'Here it is: {"summary": "S."} Done.'],
)
def test_the_json_is_found_bare_fenced_or_in_prose(content: str) -> None:
    """A JSON object is read whether the model sends it bare, in a fence, or inside prose."""
    assert json.loads(extract_json(content)) == {"summary": "S."}


def test_an_answer_without_json_is_invalid_and_keeps_its_cost() -> None:
    """No JSON object at all: `InvalidAnswer` says so and carries what the call cost."""
    usage = Usage(prompt_tokens=7, completion_tokens=3, ms=5, calls=1)
    with pytest.raises(InvalidAnswer, match=r"^the answer holds no JSON object$") as raised:
        decode_answer("I cannot help with that.", usage, _Summary, "a summary")
    assert raised.value.usage == usage


def test_an_answer_of_the_wrong_shape_names_what_was_asked_for() -> None:
    """JSON of another shape: the message names what the answer should have been."""
    with pytest.raises(InvalidAnswer, match=r"^the answer is not a summary: ") as raised:
        decode_answer('{"facts": []}', Usage(), _Summary, "a summary")
    assert raised.value.raw == '{"facts": []}'


def test_raw_control_characters_in_strings_are_repaired() -> None:
    """A raw newline inside a string (as small models write) does not make the answer invalid."""
    content = '{"summary": "Two\nlines", "facts": [{"kind": "decision", "text": "Use\tSQLite."}]}'
    summary, facts = parse_answer(content, DistillerConfig())
    assert summary == "Two lines"
    assert facts == [Fact("decision", "Use SQLite.")]


def test_answers_are_capped() -> None:
    """Facts per answer, characters per fact and per summary are capped; blank facts dropped."""
    config = DistillerConfig(max_facts=2, max_fact_chars=10, max_summary_chars=12)
    facts = [{"kind": "state", "text": t} for t in ["  ", "short", "a much longer fact text", "x"]]
    content = json.dumps({"summary": "s" * 50, "facts": facts})
    summary, kept = parse_answer(content, config)
    assert summary == "s" * 11 + "…"
    assert kept == [Fact("state", "short"), Fact("state", "a much lo…")]


def test_replaced_ids_are_integers_or_quoted_digits() -> None:
    """A `replaces` list keeps integers and quoted digits, each once; anything else is dropped."""
    content = json.dumps({"summary": "S.", "facts": [
        {"kind": "state", "text": "Alice uses Postgres.", "replaces": [3, "4", "x", True, 3]},
    ]})  # fmt: skip
    _, facts = parse_answer(content, DistillerConfig())
    assert facts[0].replaces == [3, 4]
