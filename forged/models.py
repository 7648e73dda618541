"""The types clients and plugins see: what is pushed, every API answer, what a distiller returns
and what an observer receives. Every value that crosses a boundary is a Struct; the ones passed
only between the daemon's parts and its store are in forged.store.records."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any, Literal

import msgspec

__all__ = [
    "DEFAULT_SCOPE",
    "DISTILL_OBSERVER",
    "FACT_KINDS",
    "MEMORY_TYPES",
    "NUL",
    "RECALL_KINDS",
    "SUPERSEDING_KINDS",
    "Accepted",
    "BatchInFlight",
    "ChangeAction",
    "Condensed",
    "ConsolidateAnswer",
    "ConsolidationChange",
    "ConsolidationRun",
    "ContextAnswer",
    "DeadLetterInfo",
    "DeadLettersAnswer",
    "Deleted",
    "DistilledMemory",
    "ErrorAnswer",
    "ErrorBody",
    "Fact",
    "FactAudit",
    "FactChange",
    "FactKind",
    "FactsPage",
    "ForgetAnswer",
    "Health",
    "IndexStatus",
    "Interaction",
    "Key",
    "LinePick",
    "LogStatus",
    "MemoryItem",
    "MemoryType",
    "Message",
    "ObserverState",
    "ObserverStatus",
    "RecallKind",
    "RedistillReport",
    "RedistillResult",
    "Role",
    "SearchAnswer",
    "Status",
    "StoreStatus",
    "StoredFact",
    "StoredInteraction",
    "StoredSummary",
    "SummariesPage",
    "Turn",
    "Usage",
    "normalise",
    "speaker_lines",
]

Role = Literal["user", "assistant", "system", "tool"]
FactKind = Literal["decision", "correction", "preference", "state", "event", "profile"]
FACT_KINDS: tuple[str, ...] = ("decision", "correction", "preference", "state", "event", "profile")
ObserverState = Literal["idle", "distilling", "waiting_for_llm"]
DEFAULT_SCOPE = "default"  # the scope of an interaction that names none, and of recall without one
DISTILL_OBSERVER = "distill"  # the built-in observer: its watermark, status and dead letters
EMBED_OBSERVER = "embed"  # the built-in observer that stores vectors for recall by meaning
Key = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]  # ids, scopes and sessions
NUL = "\x00"  # the one character PostgreSQL's text cannot hold: refused in a key
_NOT_WORD = re.compile(r"[^\w]+")


class Message(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One message of a finalized chat interaction."""

    role: Role
    text: str
    name: str | None = None

    def __post_init__(self) -> None:
        if not self.text.strip():
            raise ValueError("`text` must not be empty")


def speaker_lines(messages: Iterable[Message]) -> str:
    """One "speaker: text" line per message, the speaker its name or else its role: a turn's
    text as the full-text indexes, the turn index and the embeddings read it."""
    return "\n".join(f"{m.name or m.role}: {m.text}" for m in messages)


class Interaction(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """What a client pushes: a finalized interaction (one or more messages)."""

    messages: Annotated[list[Message], msgspec.Meta(min_length=1)]
    id: Key | None = None
    scope: Key = DEFAULT_SCOPE
    session: Key | None = None
    timestamp: str | None = None
    metadata: dict[str, Any] = {}

    def __post_init__(self) -> None:
        _refuse_nul(self, "id", "scope", "session")


def _refuse_nul(body: Any, *keys: str) -> None:
    """Refuse an id, scope or session holding NUL: no store keeps it as given (PostgreSQL
    refuses it, and one written otherwise could become another scope's name)."""
    for key in keys:
        if NUL in (getattr(body, key) or ""):
            raise ValueError(f"`{key}` must not hold a NUL character (\\u0000)")


class StoredInteraction(msgspec.Struct, frozen=True):
    """An interaction as the log holds it, with its place (`seq`) in acceptance order."""

    seq: int
    scope: str
    session: str | None
    timestamp: str
    tokens: int
    messages: list[Message]


class Fact(msgspec.Struct, forbid_unknown_fields=True):
    """One typed, self-contained statement distilled from a transcript.

    `sources` are the seqs of the interactions it comes from; forged sets them when it checks
    the fact against the transcript (see forged.text.grounding), and `session` to theirs when they
    share one.
    """

    kind: FactKind
    text: str
    sources: list[int] = []
    replaces: list[int] = []  # ids of known facts of the scope it updates or contradicts
    session: str | None = None  # its sources' one session (else its batch's, if it has one)


class LinePick(msgspec.Struct, frozen=True):
    """A transcript line an extractive distiller chose to keep: interaction seq, line, kind."""

    seq: int
    line: int
    kind: FactKind
    replaces: tuple[int, ...] = ()  # ids of known facts of the scope it updates or contradicts


SUPERSEDING_KINDS = frozenset({"state", "preference", "correction"})  # what a new fact replaces


def normalise(text: str) -> str:
    """Fold a fact's text so trivially different spellings compare equal."""
    return _NOT_WORD.sub(" ", text.casefold()).strip()


MAX_COUNT = 2**31 - 1  # a stored count (tokens, ms) is at most this: an `integer` column
MAX_TOTAL = 2**63 - 1  # a total shown is at most this (a database written before the clamp)


def stored_count(value: int) -> int:
    """A count as the stores keep it, clamped to 0..MAX_COUNT (a model reports what it likes)."""
    return max(0, min(value, MAX_COUNT))


class Usage(msgspec.Struct, frozen=True):
    """What one LLM call cost; `a + b` is what two sets of calls cost together (`+ None`: none)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    ms: int = 0
    calls: int = 0

    def __add__(self, other: Usage | None) -> Usage:
        if other is None:
            return self
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.ms + other.ms,
            self.calls + other.calls,
        )


class DistilledMemory(msgspec.Struct):
    """What a distiller returns for one transcript: written memory, or lines picked from it."""

    summary: str
    facts: list[Fact]
    usage: Usage = Usage()
    picks: list[LinePick] = []  # extractive: forged stores these lines verbatim


class Accepted(msgspec.Struct):
    """Answer to a successful push."""

    accepted: int
    duplicates: int
    last_seq: int


class ErrorBody(msgspec.Struct):
    """What went wrong: a snake_case `code` for programs, a `message` for people."""

    code: str
    message: str


class ErrorAnswer(msgspec.Struct):
    """Every API error: `{"error": {"code", "message"}}`."""

    error: ErrorBody


class BatchInFlight(msgspec.Struct):
    """The batch an observer is working on: how big, since when, for how long so far."""

    interactions: int
    tokens: int
    started_at: str
    elapsed_s: float = 0.0


class ObserverStatus(msgspec.Struct):
    """One observer's progress as `/v1/status` shows it."""

    name: str
    watermark: int = 0
    backlog: int = 0
    state: ObserverState = "idle"
    batches: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_ms: int = 0
    dead_letters: int = 0
    ungrounded: int = 0  # facts and summaries dropped because their transcript did not support them
    last_batch_at: str | None = None
    last_error: str | None = None
    batch: BatchInFlight | None = None  # while a batch is being worked on
    # when its model was first found unavailable, kept through the retries until it answers
    waiting_since: str | None = None
    items_per_s: float | None = None  # the embed observer's last rate: backlog / this = time left


class LogStatus(msgspec.Struct):
    last_seq: int
    count: int


class Status(msgspec.Struct):
    """Answer of `/v1/status`."""

    version: str
    uptime_s: float
    ready: bool
    shutting_down: bool
    log: LogStatus
    observers: list[ObserverStatus]
    store: StoreStatus | None = None
    index: IndexStatus | None = None  # the turn index beside the store, unless turned off


class IndexStatus(msgspec.Struct):
    """The turn index beside the store: how far it follows the log (forged.index)."""

    state: str  # opening, catching_up, ready, rewriting, failed (tried again later)
    watermark: int  # the last seq it holds
    backlog: int  # turns of the log it does not hold yet: searches use the store's index
    error: str | None = None  # why it failed, while it does


class StoreStatus(msgspec.Struct):
    """Which database holds the memory, at which schema version."""

    backend: str  # "sqlite" or "postgresql"
    schema_version: int


class Health(msgspec.Struct):
    """Answer of `/v1/health` once the daemon is ready."""

    status: Literal["ok"]


MemoryType = Literal["fact", "summary", "interaction"]
MEMORY_TYPES: tuple[MemoryType, ...] = ("fact", "summary", "interaction")
RecallKind = Literal["decision", "correction", "preference", "state", "event", "profile", "summary"]
RECALL_KINDS: tuple[str, ...] = (*FACT_KINDS, "summary")


class Turn(msgspec.Struct, frozen=True):
    """A stored interaction as a recall result cites it: verbatim, with speakers and date."""

    seq: int
    session: str | None
    timestamp: str
    speaker: str  # the message authors' names (else roles), comma-separated
    text: str  # one "speaker: text" line per message


class MemoryItem(msgspec.Struct, frozen=True, omit_defaults=True):
    """One recalled item, a fact, a summary or an interaction, with its fused score."""

    id: int  # an interaction's seq
    type: MemoryType
    kind: Literal[RecallKind, "interaction"]  # a fact's kind, "summary" or "interaction"
    scope: str
    session: str | None
    text: str
    score: float
    created_at: str  # when it was distilled; when an interaction was received
    last_seen_at: str  # when a fact was last distilled again; otherwise created_at
    first_seq: int
    last_seq: int
    first_at: str  # the timestamps of the interactions it comes from: what it is dated by
    last_at: str
    speaker: str | None = None  # an interaction's speakers, as in `Turn`
    sources: list[Turn] | None = None  # the interactions it comes from, when asked for
    superseded_by: int | None = None  # with history=true: the fact that replaced this one
    invalid_at: str | None = None  # when a superseded fact stopped being true
    corrected_by: int | None = None  # the user's fact that corrects it, put just ahead of it


class SearchAnswer(msgspec.Struct, omit_defaults=True):
    """Answer of `/v1/search`, best first; `dropped_words`, when there are any, were past the
    query's limit of distinct words (`recall.max_query_words`) and not searched."""

    results: list[MemoryItem]
    dropped_words: list[str] = []


class ContextAnswer(msgspec.Struct, omit_defaults=True):
    """Answer of `/v1/context`: the delimited block, the tokens it costs and what it holds;
    `dropped_words` as in a search."""

    text: str
    tokens: int
    items: list[MemoryItem]
    dropped_words: list[str] = []


class StoredFact(msgspec.Struct, frozen=True):
    """A fact as the store holds it, for inspection and export."""

    id: int
    kind: FactKind
    scope: str
    session: str | None
    text: str
    created_at: str
    last_seen_at: str
    seen_count: int
    first_seq: int
    last_seq: int
    batch_id: str
    first_at: str
    last_at: str
    valid_from: str  # when it became true: its first source interaction (first_at)
    invalid_at: str | None = None  # when it stopped being true; None while current or merged
    superseded_by: int | None = None  # the fact that replaced it (None: current)
    superseded_reason: str | None = None  # "user": a correction the user wrote replaced it
    source: Literal["distilled", "user"] = "distilled"  # "user": written by hand, trusted
    pinned: bool = False  # consolidation never retires a pinned fact


class StoredSummary(msgspec.Struct, frozen=True):
    """A summary as the store holds it, for inspection and export."""

    id: int
    scope: str
    session: str | None
    text: str
    created_at: str
    first_seq: int
    last_seq: int
    batch_id: str
    observer: str
    first_at: str
    last_at: str
    condensed_into: int | None = None  # the summary that condenses this one (history)


class FactsPage(msgspec.Struct):
    """Answer of `/v1/facts`: one page in id order; `next` is the cursor of the following one."""

    facts: list[StoredFact]
    next: str | None


class SummariesPage(msgspec.Struct):
    """Answer of `/v1/summaries`: one page in id order; `next` is the following page's cursor."""

    summaries: list[StoredSummary]
    next: str | None


class Deleted(msgspec.Struct):
    """What forgetting a scope erased."""

    interactions: int
    summaries: int
    facts: int


class ForgetAnswer(msgspec.Struct):
    """Answer of `DELETE /v1/scopes/{scope}`."""

    deleted: Deleted


FactText = Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]  # a fact a user writes


class NewFact(msgspec.Struct, forbid_unknown_fields=True):
    """Body of `POST /v1/facts`: a fact written by hand, dated by what it is about."""

    text: FactText
    kind: FactKind = "state"
    scope: Key = DEFAULT_SCOPE
    session: Key | None = None
    at: str | None = None  # when it became true (ISO 8601); the time of the request if none

    def __post_init__(self) -> None:
        _refuse_nul(self, "scope", "session")


class Correction(msgspec.Struct, forbid_unknown_fields=True):
    """Body of `POST /v1/facts/{id}/correct`: what the fact should say instead."""

    text: FactText
    kind: FactKind | None = None  # the corrected fact's kind if none
    at: str | None = None  # when what it says became true (ISO 8601); the fact's dates if none


class Erased(msgspec.Struct):
    """Answer of deleting one item: the edit's id in the audit trail, and what went with it
    (a deleted interaction takes the facts and summaries that rest on it alone)."""

    edit: int
    deleted: Deleted


class ScopeInfo(msgspec.Struct, frozen=True):
    """One scope of `GET /v1/scopes`: what it holds, and when it was last active."""

    scope: str
    interactions: int
    facts: int  # current ones
    summaries: int  # current ones
    first_at: str | None  # its earliest and latest interaction's timestamp
    last_at: str | None
    last_received_at: str | None  # when the daemon last accepted one of its interactions


class ScopesAnswer(msgspec.Struct):
    """Answer of `GET /v1/scopes`, most recently active first."""

    scopes: list[ScopeInfo]


class LoggedInteraction(msgspec.Struct, frozen=True):
    """One interaction of `GET /v1/interactions`: verbatim, scrubbed, dated by its timestamp."""

    seq: int
    scope: str
    session: str | None
    timestamp: str
    received_at: str
    messages: list[Message]


class InteractionsPage(msgspec.Struct):
    """Answer of `GET /v1/interactions`: a scope's turns by time; `next` for the following page."""

    interactions: list[LoggedInteraction]
    next: str | None


class EditRecord(msgspec.Struct, frozen=True):
    """One entry of the edit trail (`GET /v1/edits`): who changed what, when (never the text)."""

    id: int
    scope: str
    action: Literal["delete", "correct", "add", "pin", "unpin"]
    item: Literal["interaction", "summary", "fact"]
    item_id: int
    into_id: int | None
    created_at: str


class EditsAnswer(msgspec.Struct):
    """Answer of `GET /v1/edits`, newest first."""

    edits: list[EditRecord]


class DeadLetterInfo(msgspec.Struct, frozen=True):
    """An open dead letter as `GET /v1/dead-letters` lists it."""

    id: int
    seq: int
    scope: str
    reason: str
    raw_excerpt: str | None
    created_at: str


class DeadLettersAnswer(msgspec.Struct):
    """Answer of `GET /v1/dead-letters`, oldest seq first."""

    dead_letters: list[DeadLetterInfo]


class RedistillResult(msgspec.Struct, frozen=True):
    """What re-running one dead letter did."""

    seq: int
    dead_letter_id: int
    outcome: Literal["redistilled", "still_failing"]
    facts: int = 0
    reason: str | None = None


class RedistillReport(msgspec.Struct, frozen=True):
    """Answer of `POST /v1/dead-letters/redistill`."""

    redistilled: int
    still_failing: int
    results: list[RedistillResult]


ChangeAction = Literal["merge", "supersede", "condense"]


class ConsolidationChange(msgspec.Struct, frozen=True):
    """One change a consolidation run makes: `fact_id` retired, `into_id` stands in for it."""

    action: ChangeAction  # merge: a duplicate; supersede: no longer true; condense: summaries
    fact_id: int  # (for condense, both ids are summaries')
    into_id: int
    reason: str


class Condensed(msgspec.Struct, frozen=True):
    """Older summaries of a scope and the one summary that stands in for them."""

    summary_ids: list[int]
    text: str


class ConsolidationRun(msgspec.Struct, frozen=True):
    """What one run over one scope produced, committed in one transaction with its progress."""

    run_id: str
    model: str
    scope: str
    facts: int  # current facts considered
    through_fact_id: int  # the newest of them: the scope's progress once committed
    changes: list[ConsolidationChange]
    usage: Usage
    ungrounded: int = 0  # texts the grounding check dropped
    condensed: Condensed | None = None  # older summaries condensed into one


class FactChange(msgspec.Struct, frozen=True):
    """One entry of a fact's audit trail: a change, the run that made it, and the other fact."""

    action: ChangeAction
    run_id: str
    reason: str
    created_at: str
    fact: StoredFact  # the fact on the other side of the change


class FactAudit(msgspec.Struct, frozen=True):
    """Answer of `GET /v1/facts/{id}`: a fact, what it replaced and what replaced it."""

    fact: StoredFact
    replaced: list[FactChange]  # facts this one stands in for
    replaced_by: FactChange | None  # the change that retired it, if any


class ConsolidateAnswer(msgspec.Struct, frozen=True):
    """Answer of `POST /v1/consolidate`: each scope's run."""

    runs: list[ConsolidationRun]
