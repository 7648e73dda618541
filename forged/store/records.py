"""The daemon's own records: what its parts hand the store to write (an interaction for the log,
a batch's results, dead letters and runs) and what the store hands back to them (what a forget
erased, an open dead letter to re-run). None crosses the API: forged.models holds what clients
and plugins see."""

from __future__ import annotations

import msgspec

from forged.models import Deleted, Fact, ObserverStatus, StoredInteraction, Usage

__all__ = [
    "BatchOutcome",
    "DeadLetter",
    "DistillRun",
    "Forgotten",
    "NewInteraction",
    "OpenDeadLetter",
    "ScopeResult",
    "StoredVector",
    "VectorBatch",
]


class NewInteraction(msgspec.Struct, frozen=True):
    """A validated, scrubbed interaction ready for the log."""

    client_id: str | None
    scope: str
    session: str | None
    timestamp: str
    received_at: str
    tokens: int
    messages: bytes  # JSON
    metadata: bytes | None  # JSON


class ScopeResult(msgspec.Struct, frozen=True):
    """A distilled summary and its facts for the interactions of one scope in a batch."""

    batch_id: str
    scope: str
    session: str | None
    summary: str
    facts: list[Fact]
    first_seq: int
    last_seq: int


class DeadLetter(msgspec.Struct, frozen=True):
    """An interaction the distiller could not handle even alone."""

    seq: int
    reason: str
    raw: str | None = None


class DistillRun(msgspec.Struct, frozen=True):
    """Accounting for one scope group of one batch."""

    batch_id: str
    model: str
    scope: str
    interactions: int
    first_seq: int
    last_seq: int
    usage: Usage
    outcome: str  # committed, dead_letter, redistilled
    error: str | None = None
    ungrounded: int = 0  # facts and summaries the grounding check dropped


class BatchOutcome(msgspec.Struct, frozen=True):
    """Everything a batch produced, committed in one transaction with the watermark."""

    results: list[ScopeResult]
    dead_letters: list[DeadLetter]
    runs: list[DistillRun]
    watermark: int | None  # None when re-running dead letters: the watermark stays
    resolved_dead_letters: list[int] = []


class Forgotten(msgspec.Struct, frozen=True):
    """What forgetting a scope did, for whoever holds the scope's interactions in memory."""

    deleted: Deleted
    through: int  # the scope's last seq: every seq of the scope up to it is erased (0: none)
    totals: dict[str, ObserverStatus]  # each observer's totals as they are on disk now


class OpenDeadLetter(msgspec.Struct, frozen=True):
    """An open dead letter with the interaction it stands for, ready to be distilled again."""

    id: int
    reason: str
    interaction: StoredInteraction


class StoredVector(msgspec.Struct, frozen=True):
    """One item's vector, as forged.vectors.codec encodes it."""

    item: str  # interaction, fact or summary
    item_id: int  # the interaction's seq, the fact's or the summary's id
    vector: bytes


class VectorBatch(msgspec.Struct, frozen=True):
    """What the embed observer commits at once: vectors, and how far it got in the log (the
    watermark) and in the facts and summaries (`progress`: the last id of each embedded)."""

    vectors: list[StoredVector]
    watermark: int | None
    progress: dict[str, int]
