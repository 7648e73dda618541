"""Reading a model's answer: JSON found in its content, decoded, checked and capped."""

from __future__ import annotations

import json

import msgspec
import pytest

from forged.config import DistillerConfig
from forged.errors import InvalidAnswer
from forged.llm.answer import count, decode_answer, extract_json, parse_answer, parse_picks
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
    content = json.dumps(
        {
            "summary": "S.",
            "facts": [
                {
                    "kind": "state",
                    "text": "Alice uses Postgres.",
                    "replaces": [3, "4", "x", True, 3],
                },
            ],
        }
    )
    _, facts = parse_answer(content, DistillerConfig())
    assert facts[0].replaces == [3, 4]


@pytest.mark.parametrize("style", ["abstractive", "extractive"])
def test_only_ascii_digits_name_a_fact(style: str) -> None:
    """Superscripts, other scripts' digits, floats and ids past 64 bits name no fact: they are
    dropped, never raised (`int("²")` would stop the observer)."""
    odd = ["²", "١٢", "\uff13", 1.5, 2**64 - 1, 2**63, "99999999999999999999", -4, 0, 5, "6"]
    if style == "extractive":
        content = json.dumps({"lines": [{"line": "1.1", "kind": "state", "replaces": odd}]})
        assert parse_picks(content, DistillerConfig())[0].replaces == (5, 6)
    else:
        fact = {"kind": "state", "text": "Alice uses Postgres.", "replaces": odd}
        content = json.dumps({"summary": "S.", "facts": [fact]})
        assert parse_answer(content, DistillerConfig())[1][0].replaces == [5, 6]


def test_a_pick_with_other_digits_names_no_line() -> None:
    """A picked line id in superscript or full-width digits is dropped like any malformed id."""
    content = json.dumps(
        {"lines": [{"line": "¹.²", "kind": "state"}, {"line": "\uff11.1", "kind": "state"}]}
    )
    assert parse_picks(content, DistillerConfig()) == []


NESTED = "[" * 100_000 + "]" * 100_000  # deeper than any decoder recurses


@pytest.mark.parametrize(
    "content",
    [
        f'{{"summary": "S.", "facts": [{{"kind": "state", "text": "T.", "replaces": {NESTED}}}]}}',
        f'{{"summary": "S.", "deep": {NESTED}}}',
        f'{{"summary": "S.", "facts": [{{"kind": "state", "text": "T.", "x": {NESTED}}}]}}',
    ],
    ids=["replaces", "unknown-field", "fact-extra-key"],
)
def test_any_decoding_failure_is_an_invalid_answer(content: str) -> None:
    """Nesting past the decoder's depth is InvalidAnswer (retried, split, dead-lettered),
    never a RecursionError that stops the observer."""
    with pytest.raises(InvalidAnswer, match=r"^the answer is not valid memory: nested too deeply$"):
        parse_answer(content, DistillerConfig())


def test_an_integer_past_64_bits_is_an_invalid_answer() -> None:
    """A 5,000-digit id is an invalid answer, never an OverflowError at commit."""
    fact = f'{{"kind": "state", "text": "T is t.", "replaces": [{"9" * 5000}, 3]}}'
    with pytest.raises(InvalidAnswer, match=r"Integer value out of range - at `\$.facts\[0\]"):
        parse_answer(f'{{"summary": "S.", "facts": [{fact}]}}', DistillerConfig())


def test_a_deep_answer_to_the_judge_is_an_invalid_answer_with_its_cost() -> None:
    """The consolidation judge and condensing read through the same boundary."""
    usage = Usage(prompt_tokens=7, completion_tokens=3, ms=5, calls=1)
    with pytest.raises(
        InvalidAnswer, match=r"^the answer is not a summary: nested too deeply$"
    ) as raised:
        decode_answer(f'{{"summary": "S.", "x": {NESTED}}}', usage, _Summary, "a summary")
    assert raised.value.usage == usage


@pytest.mark.parametrize(
    ("reported", "stored"),
    [
        (2**63 - 1, 2**31 - 1),
        (2**70, 2**31 - 1),
        (-5, 0),
        (1e999, 2**31 - 1),
        ("12", 0),
        (None, 0),
        (True, 0),
        (float("nan"), 0),
        (41, 41),
    ],
)
def test_token_counts_are_clamped(reported: object, stored: int) -> None:
    """A count a model reports is stored in 0..2**31-1; what is no number counts 0."""
    assert count(reported) == stored
