"""What the benchmarks push and store: LoCoMo turns when present, generated ones otherwise."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from forged.text.tokens import estimate_tokens

LOCOMO = Path("shared/datasets/locomo10.json")  # looked for beside the repository and above it
LOCOMO_ENV = "FORGED_BENCH_LOCOMO"  # a path to the dataset file, to override the search
SEED = 7  # generated text is the same on every run
RECEIVED_AT = "2026-01-01T00:00:00.000Z"  # timestamp of rows written straight into a store

NAMES = (  # noqa: SIM905 - one string of words reads better than a column of quotes
    "Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy Rupert"
    " Sybil Trent Victor Walter Yara"
).split()
TOPICS = (  # noqa: SIM905 - one string of words reads better than a column of quotes
    "PostgreSQL Redis Kafka Kubernetes Terraform GraphQL Rust Django React Svelte Nginx"
    " Prometheus Grafana Airflow Spark Elasticsearch MongoDB SQLite RabbitMQ Celery Docker"
    " Ansible Jenkins Vault Consul Envoy Istio Flask FastAPI Tailwind"
).split()
PLACES = (  # noqa: SIM905 - one string of words reads better than a column of quotes
    "billing search checkout onboarding analytics payments auth notifications reporting"
    " inventory shipping gateway mobile dashboard scheduler"
).split()
_REASONS = (
    "it is faster",
    "the team knows it",
    "it costs less",
    "it scales better",
    "the audit asked for it",
    "support ends next year",
    "latency was too high",
    "the old one kept crashing",
    "it has better tooling",
    "the vendor raised prices",
)
_VERBS = (
    "decided to move {p} to {t} because {r}",
    "prefers {t} over the old stack for {p} since {r}",
    "corrected the plan: {p} stays on {t} because {r}",
    "reported that {p} now runs on {t}, as {r}",
    "wants reviews of every {t} change in {p} because {r}",
)
FACT_KINDS = ("decision", "preference", "correction", "state", "preference")  # by template


@dataclass(frozen=True)
class Turn:
    """One message of a conversation, with where it belongs."""

    scope: str
    session: str
    speaker: str
    text: str


def locomo_path(start: Path) -> Path | None:
    """Where LoCoMo's file is: the environment's choice, else beside the repository or above."""
    if env := os.environ.get(LOCOMO_ENV):
        return Path(env) if Path(env).is_file() else None
    for directory in [start, *start.parents]:
        if (directory / LOCOMO).is_file():
            return directory / LOCOMO
    return None


def locomo_samples(start: Path) -> list[dict[str, Any]]:
    """LoCoMo's conversations as the file holds them; none when it is not found."""
    path = locomo_path(start)
    return [] if path is None else list(json.loads(path.read_bytes()))


def _locomo(samples: list[dict[str, Any]]) -> Iterator[Turn]:
    for sample in samples:
        conversation = sample["conversation"]
        sessions = [
            k for k, v in conversation.items() if k.startswith("session_") and isinstance(v, list)
        ]
        for key in sorted(sessions, key=lambda k: int(k.split("_")[1])):
            for turn in conversation[key]:
                yield Turn(f"locomo:{sample['sample_id']}", key, turn["speaker"], turn["text"])


def sentence(i: int) -> tuple[str, str]:
    """The i-th generated statement (a distinct one for every i) and its kind."""
    n, i = len(NAMES), i * 7919  # a prime stride spreads neighbours over every word list
    who, i = NAMES[i % n], i // n
    verb, i = i % len(_VERBS), i // len(_VERBS)
    topic, i = TOPICS[i % len(TOPICS)], i // len(TOPICS)
    place, i = PLACES[i % len(PLACES)], i // len(PLACES)
    reason = _REASONS[i % len(_REASONS)]
    text = f"{who} {_VERBS[verb].format(p=place, t=topic, r=reason)}, ticket {i // len(_REASONS)}."
    return text, FACT_KINDS[verb]


def _generated() -> Iterator[Turn]:
    rng = random.Random(SEED)
    for i in range(6_000):
        text, _ = sentence(rng.randrange(1_000_000))
        yield Turn(f"user:{NAMES[i // 600]}", f"chat-{i // 30}", NAMES[i % 7], text)


def turns(repo: Path) -> tuple[list[Turn], str]:
    """The conversation turns to push, and where they come from."""
    if samples := locomo_samples(repo):
        return list(_locomo(samples)), "LoCoMo (locomo10.json)"
    return list(_generated()), "generated (LoCoMo not found)"


def interaction(i: int, turn: Turn, tag: str) -> dict[str, Any]:
    """The i-th pushed interaction, with an idempotency key unique to `tag`."""
    return {
        "id": f"{tag}-{i}",
        "scope": turn.scope,
        "session": turn.session,
        "messages": [{"role": "user", "name": turn.speaker, "text": turn.text}],
    }


def interactions(corpus: list[Turn], n: int, tag: str) -> list[dict[str, Any]]:
    """`n` interactions, going round the corpus as often as needed."""
    return [interaction(i, corpus[i % len(corpus)], tag) for i in range(n)]


def ndjson(items: list[dict[str, Any]]) -> bytes:
    return b"\n".join(msgspec.json.encode(i) for i in items) + b"\n"


def log_row(item: dict[str, Any], received_at: str = RECEIVED_AT) -> tuple[Any, ...]:
    """An interaction as a row of the interactions table, the way ingest writes it."""
    text = "".join(m["text"] for m in item["messages"])
    return (
        item["id"],
        item["scope"],
        item["session"],
        received_at,
        received_at,
        estimate_tokens(text),
        msgspec.json.encode(item["messages"]),
        None,
    )
