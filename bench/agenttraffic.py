"""Agent traffic: LoCoMo's conversations retold as one person chatting with an assistant.

A development set shaped like what an agent runtime pushes, generated at run time (seeded, the
same on every run) from LoCoMo's file, which is never copied into the project. For each
conversation its first speaker is the user. A few turns of a session in a row become one long
user message: the user's own turns as said, the other speaker's as reported speech
(`Melanie said: "…"`). Each gets an assistant reply of generic markdown (headings, steps,
bullets, a table, a code block) that echoes a few of the user's words, as assistants do. Into
this the generator puts what an agent's user says of their own: values that change later (a
time, an amount, a choice, restated in a later session), preferences, decisions taken on the
assistant's recommendation, and results the assistant reports. LoCoMo's questions of
categories 1-4 keep their answers; their evidence is the exchanges holding the cited turns.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench import agentreplies
from bench.corpus import locomo_samples
from bench.quality import CATEGORIES, session_start

__all__ = ["SYNTHETIC", "AgentChat", "AgentQuestion", "chats"]

SEED = 37  # every chat is drawn from random.Random(SEED + its index)
TURNS_PER_MESSAGE = (3, 8)  # LoCoMo turns one user message retells, at least and at most
EXCHANGE_MINUTES = 3  # minutes between exchanges of a session
SYNTHETIC = ("update", "preference", "decision", "result")  # question kinds the generator adds
UPDATES_PER_CHAT = 4  # values that change, per chat
PREFERENCES_PER_CHAT = 2
DECISIONS_PER_CHAT = 2
RESULTS_PER_CHAT = 2

# What changes: the first statement, the later one, the question, and the values (first, later).
_UPDATES = (
    ("I usually do my morning run at {v}.", "I moved my morning run to {v}.",
     "What time does {u} do the morning run?", ("6:30 am", "7:15 am", "5:45 am", "8:10 am")),
    ("The dashboard API averages {v} at the moment.",
     "The dashboard API now averages {v} after the caching fix.",
     "How fast is the dashboard API on average?", ("420 ms", "250 ms", "610 ms", "180 ms")),
    ("My monthly rent is {v}.", "My landlord raised my monthly rent to {v}.",
     "How much is {u}'s monthly rent?", ("1150 dollars", "1290 dollars", "980 dollars")),
    ("Our team standup is at {v} every weekday.", "We moved the team standup to {v}.",
     "When is the team standup?", ("9:30 am", "10:15 am", "11:45 am")),
    ("My commute takes {v} each way.", "Since the office move my commute takes {v} each way.",
     "How long does {u}'s commute take?", ("40 minutes", "25 minutes", "55 minutes")),
    ("I go to the gym on {v}.", "I switched my gym days to {v}.",
     "Which days does {u} go to the gym?", ("Mondays and Thursdays", "Tuesdays and Saturdays",
                                              "Wednesdays and Sundays")),
    ("My book club meets at {v}.", "The book club now meets at {v} instead.",
     "Where does {u}'s book club meet?", ("the library", "Rosa's cafe", "the community hall")),
    ("My phone plan gives me {v} of data.", "I upgraded my phone plan to {v} of data.",
     "How much data does {u}'s phone plan give?", ("8 GB", "20 GB", "35 GB")),
    ("Our weekly grocery budget is {v}.", "We raised the weekly grocery budget to {v}.",
     "What is {u}'s weekly grocery budget?", ("140 dollars", "175 dollars", "95 dollars")),
    ("My piano lesson is on {v}.", "My piano lesson moved to {v}.",
     "When is {u}'s piano lesson?", ("Tuesday evenings", "Friday mornings", "Sunday afternoons")),
)  # fmt: skip
_PREFERENCES = (  # purpose, the options; "I prefer A over B for it."
    ("note taking", ("Obsidian", "Notion", "paper notebooks")),
    ("video calls", ("Jitsi", "Zoom", "FaceTime")),
    ("trip planning", ("spreadsheets", "Wanderlog", "TripIt")),
    ("reading", ("a Kobo", "paperbacks", "audiobooks")),
    ("password storage", ("Bitwarden", "1Password", "KeePassXC")),
    ("morning coffee", ("a moka pot", "pour-over", "an espresso machine")),
)
_DECISIONS = (  # purpose, the options: the assistant recommends, the user accepts
    ("the family photo backup", ("Backblaze", "Syncthing", "an external drive")),
    ("the household budget", ("YNAB", "Actual Budget", "a shared spreadsheet")),
    ("the recipe collection", ("Mealie", "Paprika", "Tandoor")),
    ("the kids' chore chart", ("Trello", "a whiteboard", "OurHome")),
    ("the volunteer schedule", ("Google Calendar", "SignUpGenius", "Doodle")),
)
_RESULTS = (  # what the assistant ran, and the unit of what it reports
    ("photo library import", "minutes"),
    ("backup restore test", "minutes"),
    ("spreadsheet cleanup script", "seconds"),
    ("playlist export", "seconds"),
    ("receipt scanning batch", "minutes"),
)
_WORD = re.compile(r"[A-Za-z']+")
_FILLER = frozenset(  # long words that name no topic, left out of what the assistant echoes
    (  # noqa: SIM905 - a paragraph of words reads better than a column of quotes
        "really totally definitely actually something things always little pretty thanks "
        "awesome amazing wonderful sounds though through anything everything glad"
    ).split()
)
_DIA = re.compile(r"D\d+:\d+")


@dataclass(frozen=True)
class AgentQuestion:
    """A question, its answer, the exchanges (indexes) holding its evidence, and for a changed
    value the stale answer."""

    category: str
    text: str
    answer: str
    evidence: frozenset[int]
    stale: str = ""


@dataclass
class AgentChat:
    """One conversation as agent traffic: its exchanges (interactions of two messages each),
    its questions, and the kind of every assistant line (heading, code, table, bullet, prose)."""

    sample_id: str
    scope: str
    user: str
    interactions: list[dict[str, Any]] = field(default_factory=list)
    questions: list[AgentQuestion] = field(default_factory=list)
    line_kinds: dict[str, str] = field(default_factory=dict)


@dataclass
class _Exchange:
    session: str
    timestamp: str
    user: list[str]
    assistant: list[str] = field(default_factory=list)
    dia_ids: set[str] = field(default_factory=set)


def _retold(turn: dict[str, Any], user: str) -> str:
    """A LoCoMo turn in the user's message: their own as said, the other's as reported."""
    text = " ".join(str(turn["text"]).split())
    if caption := turn.get("blip_caption"):
        text += f" (photo: {caption})"
    return text if turn["speaker"] == user else f'{turn["speaker"]} said: "{text}"'


def _exchanges(sample: dict[str, Any], rng: random.Random) -> list[_Exchange]:
    """The conversation cut into user messages of a few turns each, session by session."""
    talk, user = sample["conversation"], sample["conversation"]["speaker_a"]
    sessions = sorted(
        (k for k in talk if re.fullmatch(r"session_\d+", k) and talk[k]),
        key=lambda k: int(k.split("_")[1]),
    )
    out: list[_Exchange] = []
    for key in sessions:
        start, turns = session_start(talk[f"{key}_date_time"]), talk[key]
        at = 0
        while at < len(turns):
            size = rng.randint(*TURNS_PER_MESSAGE)
            group = turns[at : at + size]
            stamp = start + timedelta(minutes=EXCHANGE_MINUTES * len(out))
            when = stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            exchange = _Exchange(key, when, [_retold(t, user) for t in group])
            exchange.dia_ids = {t["dia_id"] for t in group}
            out.append(exchange)
            at += size
    return out


def _topics(words: str, names: set[str], rng: random.Random) -> list[str]:
    """A few of the user's longer words, most said first: what the assistant echoes."""
    counts: dict[str, int] = {}
    for w in _WORD.findall(words.casefold()):
        if len(w) >= 6 and "'" not in w and w not in _FILLER and w not in names:
            counts[w] = counts.get(w, 0) + 1
    ranked = sorted(counts, key=lambda w: -counts[w])[:6] or ["plans", "week", "ideas"]
    return rng.sample(ranked, min(3, len(ranked)))


def _plant(exchanges: list[_Exchange], user: str, rng: random.Random) -> list[AgentQuestion]:
    """Put the user's changing values, preferences, decisions and the assistant's results into
    the exchanges; the questions they answer."""
    n, questions = len(exchanges), []
    for first, later, asked, values in rng.sample(_UPDATES, UPDATES_PER_CHAT):
        old, new = rng.sample(values, 2)
        a, b = rng.randrange(0, n // 3), rng.randrange(n // 2, n)
        exchanges[a].user.insert(rng.randint(0, len(exchanges[a].user)), first.format(v=old))
        exchanges[b].user.insert(rng.randint(0, len(exchanges[b].user)), later.format(v=new))
        questions.append(
            AgentQuestion("update", asked.format(u=user), new, frozenset({b}), stale=old)
        )
    for purpose, options in rng.sample(_PREFERENCES, PREFERENCES_PER_CHAT):
        best, other = rng.sample(options, 2)
        at = rng.randrange(n)
        said = f"For {purpose} I prefer {best} over {other}."
        exchanges[at].user.insert(rng.randint(0, len(exchanges[at].user)), said)
        question = f"What does {user} prefer for {purpose}?"
        questions.append(AgentQuestion("preference", question, best, frozenset({at})))
    for purpose, options in rng.sample(_DECISIONS, DECISIONS_PER_CHAT):
        choice = rng.choice(options)
        at = rng.randrange(n - 1)
        exchanges[at].assistant = agentreplies.recommending(choice, purpose, rng)
        exchanges[at + 1].user.insert(0, f"Sounds good, let's go with {choice} for {purpose}.")
        question = f"What did {user} choose for {purpose}?"
        questions.append(AgentQuestion("decision", question, choice, frozenset({at, at + 1})))
    for thing, unit in rng.sample(_RESULTS, RESULTS_PER_CHAT):
        took = f"{rng.randint(3, 59)} {unit}"
        at = rng.randrange(n)
        exchanges[at].assistant = agentreplies.reporting(thing, took, rng)
        question = f"How long did {user}'s {thing} take?"
        questions.append(AgentQuestion("result", question, took, frozenset({at})))
    return questions


def _locomo_questions(sample: dict[str, Any], exchanges: list[_Exchange]) -> list[AgentQuestion]:
    """LoCoMo's questions of categories 1-4, their evidence the exchanges holding the turns."""
    where = {d: i for i, e in enumerate(exchanges) for d in e.dia_ids}
    out = []
    for q in sample["qa"]:
        cited = _DIA.findall(" ".join(map(str, q.get("evidence", []))))
        if q["category"] not in CATEGORIES or "answer" not in q or not cited:
            continue
        evidence = frozenset(where[d] for d in cited if d in where)
        if evidence:
            category = CATEGORIES[q["category"]]
            out.append(AgentQuestion(category, q["question"], str(q["answer"]), evidence))
    return out


def _chat(index: int, sample: dict[str, Any]) -> AgentChat:
    rng = random.Random(SEED + index)
    user = sample["conversation"]["speaker_a"]
    chat = AgentChat(sample["sample_id"], f"agent:{sample['sample_id']}", user)
    exchanges = _exchanges(sample, rng)
    talk = sample["conversation"]
    names = {talk["speaker_a"].casefold(), talk["speaker_b"].casefold()}
    chat.questions = _locomo_questions(sample, exchanges) + _plant(exchanges, user, rng)
    for n, e in enumerate(exchanges):
        text = " ".join(e.user)
        if not e.assistant:
            e.assistant = agentreplies.generic(_topics(text, names, rng), rng)
        chat.line_kinds |= agentreplies.kinds(e.assistant)
        chat.interactions.append(
            {
                "id": f"{chat.scope}:{n}",
                "scope": chat.scope,
                "session": e.session,
                "timestamp": e.timestamp,
                "messages": [
                    {"role": "user", "name": user, "text": text},
                    {"role": "assistant", "text": "\n".join(e.assistant)},
                ],
            }
        )
    return chat


def chats(repo: Path, limit: int | None = None) -> list[AgentChat]:
    """The first `limit` LoCoMo conversations (all when None) as agent traffic; none without
    LoCoMo's file."""
    return [_chat(i, s) for i, s in enumerate(locomo_samples(repo)[:limit])]
