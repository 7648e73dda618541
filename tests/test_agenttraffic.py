"""The agent-traffic development set: what it is made of, and that its answers are where it says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import agentreplies, agenttraffic
from bench.corpus import LOCOMO_ENV

SESSIONS = 3
TURNS = 14  # per session: a few user messages each


def _sample(n: int) -> dict[str, Any]:
    """A conversation shaped as LoCoMo's, with one question per session."""
    talk: dict[str, Any] = {"speaker_a": "Ana", "speaker_b": "Ben"}
    qa = []
    for s in range(1, SESSIONS + 1):
        talk[f"session_{s}_date_time"] = f"1:5{s} pm on {s} May, 2023"
        talk[f"session_{s}"] = [
            {
                "speaker": "Ana" if t % 2 else "Ben",
                "dia_id": f"D{s}:{t}",
                "text": f"I planted {n}-{s}-{t} tulips in the community garden today.",
            }
            for t in range(1, TURNS + 1)
        ]
        qa.append(
            {
                "question": f"What did Ana plant ({s})?",
                "answer": "tulips",
                "evidence": [f"D{s}:3"],
                "category": 4,
            }
        )
    return {"sample_id": f"conv-{n}", "conversation": talk, "qa": qa, "observation": {}}


@pytest.fixture
def chats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[agenttraffic.AgentChat]:
    data = tmp_path / "locomo10.json"
    data.write_text(json.dumps([_sample(0), _sample(1)]))
    monkeypatch.setenv(LOCOMO_ENV, str(data))
    return agenttraffic.chats(tmp_path)


def _user_text(chat: agenttraffic.AgentChat, exchange: int) -> str:
    return str(chat.interactions[exchange]["messages"][0]["text"])


def test_the_set_is_the_same_on_every_run(
    chats: list[agenttraffic.AgentChat], tmp_path: Path
) -> None:
    """Generated twice from the same file, the chats are equal, interaction for interaction."""
    again = agenttraffic.chats(tmp_path)
    assert [c.interactions for c in again] == [c.interactions for c in chats]
    assert [c.questions for c in again] == [c.questions for c in chats]


def test_each_exchange_is_a_user_message_and_a_long_markdown_answer(
    chats: list[agenttraffic.AgentChat],
) -> None:
    """Every interaction holds the user's message and the assistant's markdown, which has
    headings and bullets."""
    for chat in chats:
        for interaction in chat.interactions:
            user, assistant = interaction["messages"]
            assert (user["role"], user["name"], assistant["role"]) == ("user", "Ana", "assistant")
            kinds = agentreplies.kinds(assistant["text"].splitlines())
            assert {"heading", "bullet"} <= set(kinds.values())
            assert len(assistant["text"].splitlines()) >= 30


def test_a_locomo_question_points_at_the_exchange_holding_its_turn(
    chats: list[agenttraffic.AgentChat],
) -> None:
    """A question's evidence is the exchange whose user message retells the cited turn."""
    for n, chat in enumerate(chats):
        asked = [q for q in chat.questions if q.category == "single-hop"]
        assert len(asked) == SESSIONS
        for s, q in enumerate(asked, start=1):
            (exchange,) = q.evidence
            assert f"I planted {n}-{s}-3 tulips" in _user_text(chat, exchange)


def test_a_changed_value_is_said_first_and_restated_later(
    chats: list[agenttraffic.AgentChat],
) -> None:
    """Each changed value: the stale one said in an earlier exchange, the new one in the
    question's evidence, later."""
    for chat in chats:
        updates = [q for q in chat.questions if q.stale]
        assert len(updates) == agenttraffic.UPDATES_PER_CHAT
        for q in updates:
            (later,) = q.evidence
            assert q.answer in _user_text(chat, later)
            earlier = [x for x in range(later) if q.stale in _user_text(chat, x)]
            assert earlier, q


def test_an_accepted_recommendation_spans_the_answer_and_the_reply(
    chats: list[agenttraffic.AgentChat],
) -> None:
    """A decision's evidence is the assistant's recommendation and the user's acceptance."""
    for chat in chats:
        for q in (q for q in chat.questions if q.category == "decision"):
            first, then = sorted(q.evidence)
            answer = chat.interactions[first]["messages"][1]["text"]
            assert f"**Recommendation:** use {q.answer}" in answer
            assert _user_text(chat, then).startswith(f"Sounds good, let's go with {q.answer}")


def test_kinds_tells_headings_code_tables_and_bullets_apart() -> None:
    """Each line of an answer is classified by what it is, code inside a fence as code."""
    lines = [
        "## Title",
        "Some prose.",
        "- a bullet",
        "1. a step",
        "| a | b |",
        "```python",
        "x = 1",
        "```",
    ]
    assert agentreplies.kinds(lines) == {
        "## Title": "heading",
        "Some prose.": "prose",
        "- a bullet": "bullet",
        "1. a step": "bullet",
        "| a | b |": "table",
        "```python": "code",
        "x = 1": "code",
        "```": "code",
    }
