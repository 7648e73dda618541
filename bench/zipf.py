"""A year of chat in one scope: generated turns whose words follow Zipf's law, so that rare,
mid-frequency and common words exist as in real text, and the store holding them."""

from __future__ import annotations

import itertools
import random
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from bench.corpus import NAMES, SEED
from bench.stores import BARE, BARE_TOKENIZER, _fresh, _load, _without_triggers
from forged.store.sqlite_schema import FILL_BLOCKS

VOCABULARY = 200_000  # distinct words; the rarest are in a few turns of 300,000
WORDS_PER_TURN = (8, 32)  # a turn's length in words, drawn evenly
ZIPF_EXPONENT = 1.0  # word of rank r is drawn with weight 1 / r**s
SPAN_DAYS = 365  # the turns are dated over the last year
SCOPE_A = "user:a"  # the scope of a year of chat
SCOPE_B = "user:b"  # another scope, small, searched while scope A is busy
B_TURNS = 1_000  # turns of scope B
_ONSETS = "b d f g k m p r t v"
_VOWELS = "a o u"
_INSERT = """INSERT INTO interactions
    (client_id, scope, session, timestamp, received_at, tokens, messages, metadata)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)"""


def word(rank: int) -> str:
    """The word of a rank: syllables and a final z, which the porter stemmer leaves as they are
    and no function word is."""
    syllables = [c + v for c in _ONSETS.split() for v in _VOWELS.split()]
    out = []
    rank += 1
    while rank:
        rank, digit = divmod(rank, len(syllables))
        out.append(syllables[digit])
    return "".join(out) + "z"


def _texts(n: int, seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    weights = list(itertools.accumulate(1 / r**ZIPF_EXPONENT for r in range(1, VOCABULARY + 1)))
    words = [word(r) for r in range(VOCABULARY)]
    low, high = WORDS_PER_TURN
    for _ in range(n):
        picked = rng.choices(words, cum_weights=weights, k=rng.randint(low, high))
        yield " ".join(picked) + "."


def _rows(scope: str, n: int, seed: int, now: datetime) -> Iterator[tuple[Any, ...]]:
    for i, text in enumerate(_texts(n, seed)):
        at = (now - timedelta(days=SPAN_DAYS * (n - i) / n)).isoformat(timespec="milliseconds")
        at = at.replace("+00:00", "Z")
        said = [{"role": "user", "name": NAMES[i % len(NAMES)], "text": text}]
        yield (
            f"{scope}-{i}",
            scope,
            f"chat-{i // 50}",
            at,
            at,
            len(text) // 4,
            msgspec.json.encode(said),
            None,
        )


def build(path: Path, n: int) -> None:
    """`n` turns in scope A and B_TURNS in scope B, indexed as forged's schema says, and scope
    A's texts in a bare full-text table (`BARE`)."""
    conn = _fresh(path)
    triggers = _without_triggers(conn)
    now = datetime.now(UTC)
    _load(conn, _INSERT, _rows(SCOPE_A, n, SEED, now))
    _load(conn, _INSERT, _rows(SCOPE_B, B_TURNS, SEED + 1, now))
    conn.executescript(f"""
        BEGIN;
        INSERT INTO interactions_fts (rowid, text, scope) SELECT seq, text, scope
            FROM interactions_text;
        {FILL_BLOCKS};
        CREATE VIRTUAL TABLE {BARE} USING fts5(text, content='', {BARE_TOKENIZER});
        INSERT INTO {BARE} (rowid, text) SELECT seq, text FROM interactions_text
            WHERE scope = '{_token(SCOPE_A)}';
        COMMIT;
    """)
    for sql in triggers:
        conn.execute(sql)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _token(scope: str) -> str:
    return f"s{scope.encode().hex().upper()}0"


def document_counts(path: Path) -> list[tuple[str, int]]:
    """Every word of scope A's texts with the number of turns holding it, most frequent first."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.execute(f"CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, {BARE}, 'row')")
    rows = conn.execute("SELECT term, doc FROM temp.vocab ORDER BY doc DESC, term").fetchall()
    conn.close()
    return [(str(term), int(doc)) for term, doc in rows]
