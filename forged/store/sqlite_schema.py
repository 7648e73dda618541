"""Database schema: numbered migrations, each applied once in its own transaction and recorded."""

from __future__ import annotations

import sqlite3

from forged.store import migrations
from forged.store.cjk import SQL_FUNCTION, cjk_grams
from forged.timestamps import now

__all__ = [
    "BLOCK_BITS",
    "FILL_BLOCKS",
    "MIGRATIONS",
    "SCOPE_TOKEN",
    "migrate",
    "register_functions",
]

# The time span of a fact's or summary's source interactions, for rows stored before it was
# recorded; a row whose interactions are gone keeps the time it was distilled.
_SPAN_BACKFILL = """coalesce((SELECT {bound}(i.timestamp) FROM interactions AS i
                WHERE i.scope = {table}.scope AND i.seq BETWEEN {table}.first_seq
                AND {table}.last_seq), created_at)"""
# Keep a content table's full-text index in step (recreated when the table is rebuilt).
_MEMORY_TRIGGERS = """
        CREATE TRIGGER {table}_fts_insert AFTER INSERT ON {table} BEGIN
            INSERT INTO {table}_fts (rowid, text) VALUES (new.id, new.text);
        END;
        CREATE TRIGGER {table}_fts_delete AFTER DELETE ON {table} BEGIN
            INSERT INTO {table}_fts ({table}_fts, rowid, text) VALUES ('delete', old.id, old.text);
        END;
        CREATE TRIGGER {table}_fts_update AFTER UPDATE OF text ON {table} BEGIN
            INSERT INTO {table}_fts ({table}_fts, rowid, text) VALUES ('delete', old.id, old.text);
            INSERT INTO {table}_fts (rowid, text) VALUES (new.id, new.text);
        END;"""

# The columns of summaries and of facts that version 3 keeps of version 1 (it adds time spans).
_SUMMARY_SOURCE = """observer TEXT NOT NULL,
            batch_id TEXT NOT NULL,
            scope TEXT NOT NULL,
            session TEXT,
            text TEXT NOT NULL,
            first_seq INTEGER NOT NULL,
            last_seq INTEGER NOT NULL,"""
_FACT_SOURCE = """text TEXT NOT NULL,
            norm TEXT NOT NULL,                     -- normalised text, for de-duplication
            scope TEXT NOT NULL,
            session TEXT,
            batch_id TEXT NOT NULL,
            first_seq INTEGER NOT NULL,
            last_seq INTEGER NOT NULL,"""

# A scope as one token of the full-text indexes: the hex of its UTF-8 bytes, so any scope is one
# word, never FTS syntax; the final digit keeps the porter stemmer from shortening it.
SCOPE_TOKEN = "('s' || hex({scope}) || '0')"
_INDEX_TOKENIZER = "tokenize='porter unicode61 remove_diacritics 2'"
# The scope column weighs nothing: BM25 ranks by the text alone.
_RANK_BY_TEXT = "INSERT INTO {fts} ({fts}, rank) VALUES ('rank', 'bm25(1.0, 0.0)')"
# A memory table's index: its text and its scope as a token, read from a view of the table.
_SCOPED_INDEX = f"""
        CREATE VIEW {{table}}_text (id, text, scope) AS
            SELECT id, {{text}}, {SCOPE_TOKEN.format(scope="scope")} FROM {{table}};
        CREATE VIRTUAL TABLE {{table}}_fts USING fts5(
            text, scope, content='{{table}}_text', content_rowid='id', {_INDEX_TOKENIZER}
        );
        {_RANK_BY_TEXT.format(fts="{table}_fts")};
        CREATE TRIGGER {{table}}_fts_insert AFTER INSERT ON {{table}} BEGIN
            INSERT INTO {{table}}_fts (rowid, text, scope)
                VALUES (new.id, {{new}}, {SCOPE_TOKEN.format(scope="new.scope")});
        END;
        CREATE TRIGGER {{table}}_fts_delete AFTER DELETE ON {{table}} BEGIN
            INSERT INTO {{table}}_fts ({{table}}_fts, rowid, text, scope)
                VALUES ('delete', old.id, {{old}}, {SCOPE_TOKEN.format(scope="old.scope")});
        END;
        CREATE TRIGGER {{table}}_fts_update AFTER UPDATE OF text, scope ON {{table}} BEGIN
            INSERT INTO {{table}}_fts ({{table}}_fts, rowid, text, scope)
                VALUES ('delete', old.id, {{old}}, {SCOPE_TOKEN.format(scope="old.scope")});
            INSERT INTO {{table}}_fts (rowid, text, scope)
                VALUES (new.id, {{new}}, {SCOPE_TOKEN.format(scope="new.scope")});
        END;
        INSERT INTO {{table}}_fts ({{table}}_fts) VALUES ('rebuild');"""

# What a memory table's index reads of its text: the text as it is (versions 8 to 12), or with
# its CJK runs as characters and pairs (forged.store.cjk, a function each connection registers).
_AS_IS = {"text": "text", "new": "new.text", "old": "old.text"}
_GRAMS = {k: f"{SQL_FUNCTION}({v})" for k, v in _AS_IS.items()}
# The interactions' text as the full-text index reads it, and the triggers keeping it in step.
_TURN_LINES = """(SELECT group_concat(
                       coalesce(json_extract(m.value, '$.name'), json_extract(m.value, '$.role'))
                       || ': ' || json_extract(m.value, '$.text'), char(10))
                   FROM json_each(CAST(messages AS TEXT)) AS m)"""
_INTERACTIONS_TEXT = f"""CREATE VIEW interactions_text (seq, text, scope) AS
            SELECT seq, {{lines}},
                   {SCOPE_TOKEN.format(scope="scope")}
            FROM interactions;"""
_INTERACTIONS_VIEW = _INTERACTIONS_TEXT.format(lines=_TURN_LINES)
_INTERACTIONS_TRIGGERS = """CREATE TRIGGER interactions_fts_insert AFTER INSERT ON interactions BEGIN
            INSERT INTO interactions_fts (rowid, text, scope)
                SELECT seq, text, scope FROM interactions_text WHERE seq = new.seq;
        END;
        CREATE TRIGGER interactions_fts_delete BEFORE DELETE ON interactions BEGIN
            INSERT INTO interactions_fts (interactions_fts, rowid, text, scope)
                SELECT 'delete', seq, text, scope FROM interactions_text WHERE seq = old.seq;
        END;"""
_INTERACTIONS_INDEXED = f"{_INTERACTIONS_VIEW}\n        {_INTERACTIONS_TRIGGERS}"

# Interactions by blocks of 2**BLOCK_BITS consecutive seqs, each with the latest time any of
# them happened: recall's bound on their recency decay, read without looking a turn up. A turn
# is never redated, and one forgotten leaves the bound above the rest: it stays a bound.
BLOCK_BITS = 12
FILL_BLOCKS = f"""INSERT INTO interaction_blocks SELECT seq >> {BLOCK_BITS}, max(timestamp)
    FROM interactions GROUP BY 1"""  # into the empty table

_VECTOR_TRIGGER = """CREATE TRIGGER {table}_vector_delete AFTER DELETE ON {table} BEGIN
            DELETE FROM vectors WHERE item = '{item}' AND item_id = old.{key};
        END;"""

# Each entry is one schema version; append, never edit a released one.
MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "log, results, watermarks, dead letters, distill runs",
        f"""
        CREATE TABLE interactions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- acceptance order; never reused
            client_id TEXT UNIQUE,                  -- idempotency key from the client
            scope TEXT NOT NULL,
            session TEXT,
            timestamp TEXT NOT NULL,
            received_at TEXT NOT NULL,
            tokens INTEGER NOT NULL,                -- estimate, for batch budgets
            messages BLOB NOT NULL,                 -- JSON, scrubbed
            metadata BLOB                           -- JSON, scrubbed
        );
        CREATE INDEX interactions_by_scope ON interactions (scope);
        CREATE TABLE summaries (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: paging cursors stay valid
            {_SUMMARY_SOURCE}
            created_at TEXT NOT NULL
        );
        CREATE INDEX summaries_by_scope ON summaries (scope, id);
        CREATE TABLE facts (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: paging cursors stay valid
            kind TEXT NOT NULL CHECK (kind IN ('decision', 'correction', 'preference', 'state')),
            {_FACT_SOURCE}
            created_at TEXT NOT NULL,
            seen_count INTEGER NOT NULL DEFAULT 1,
            last_seen_at TEXT NOT NULL,
            UNIQUE (scope, kind, norm)
        );
        CREATE TABLE watermarks (
            observer TEXT PRIMARY KEY,
            seq INTEGER NOT NULL                    -- every seq <= this is done for the observer
        );
        CREATE TABLE dead_letters (
            id INTEGER PRIMARY KEY,
            observer TEXT NOT NULL,
            seq INTEGER NOT NULL,
            reason TEXT NOT NULL,
            raw TEXT,                               -- the model's last answer, if any
            created_at TEXT NOT NULL,
            resolved_at TEXT
        );
        CREATE INDEX dead_letters_open ON dead_letters (observer, seq) WHERE resolved_at IS NULL;
        CREATE TABLE distill_runs (
            id INTEGER PRIMARY KEY,
            observer TEXT NOT NULL,
            batch_id TEXT NOT NULL,
            model TEXT NOT NULL,
            scope TEXT NOT NULL,
            interactions INTEGER NOT NULL,
            first_seq INTEGER NOT NULL,
            last_seq INTEGER NOT NULL,
            llm_calls INTEGER NOT NULL,
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            ms INTEGER NOT NULL,
            outcome TEXT NOT NULL,                  -- committed, dead_letter, redistilled
            error TEXT,
            created_at TEXT NOT NULL
        );
        CREATE INDEX distill_runs_by_observer ON distill_runs (observer);
        """,
    ),
    (
        "full-text index over facts and summaries",
        f"""
        CREATE VIRTUAL TABLE facts_fts USING fts5(
            text, content='facts', content_rowid='id',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        {_MEMORY_TRIGGERS.format(table="facts")}
        CREATE VIRTUAL TABLE summaries_fts USING fts5(
            text, content='summaries', content_rowid='id',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        {_MEMORY_TRIGGERS.format(table="summaries")}
        INSERT INTO facts_fts (facts_fts) VALUES ('rebuild');
        INSERT INTO summaries_fts (summaries_fts) VALUES ('rebuild');
        CREATE INDEX facts_by_scope ON facts (scope, id);
        CREATE INDEX distill_runs_by_scope ON distill_runs (scope);
        """,
    ),
    (
        "kinds event and profile; facts and summaries dated by the interactions they come from",
        f"""
        CREATE TABLE facts_v3 (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: paging cursors stay valid
            kind TEXT NOT NULL CHECK (kind IN
                ('decision', 'correction', 'preference', 'state', 'event', 'profile')),
            {_FACT_SOURCE}
            first_at TEXT NOT NULL,                 -- timestamp of the first source interaction
            last_at TEXT NOT NULL,                  -- timestamp of the last source interaction
            created_at TEXT NOT NULL,               -- when it was distilled
            seen_count INTEGER NOT NULL DEFAULT 1,
            last_seen_at TEXT NOT NULL,
            UNIQUE (scope, kind, norm)
        );
        INSERT INTO facts_v3 (id, kind, text, norm, scope, session, batch_id, first_seq,
            last_seq, first_at, last_at, created_at, seen_count, last_seen_at)
        SELECT id, kind, text, norm, scope, session, batch_id, first_seq, last_seq,
            {_SPAN_BACKFILL.format(table="facts", bound="min")},
            {_SPAN_BACKFILL.format(table="facts", bound="max")},
            created_at, seen_count, last_seen_at
        FROM facts;
        CREATE TABLE summaries_v3 (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: paging cursors stay valid
            {_SUMMARY_SOURCE}
            first_at TEXT NOT NULL,                 -- timestamp of the first source interaction
            last_at TEXT NOT NULL,                  -- timestamp of the last source interaction
            created_at TEXT NOT NULL                -- when it was distilled
        );
        INSERT INTO summaries_v3 (id, observer, batch_id, scope, session, text, first_seq,
            last_seq, first_at, last_at, created_at)
        SELECT id, observer, batch_id, scope, session, text, first_seq, last_seq,
            {_SPAN_BACKFILL.format(table="summaries", bound="min")},
            {_SPAN_BACKFILL.format(table="summaries", bound="max")},
            created_at
        FROM summaries;
        -- AUTOINCREMENT counters move with the rows: an id once used is never used again
        DELETE FROM sqlite_sequence WHERE name IN ('facts_v3', 'summaries_v3');
        INSERT INTO sqlite_sequence (name, seq)
            SELECT name || '_v3', seq FROM sqlite_sequence WHERE name IN ('facts', 'summaries');
        DROP TABLE facts;                           -- with its triggers and indexes
        DROP TABLE summaries;
        ALTER TABLE facts_v3 RENAME TO facts;       -- same ids: the full-text indexes stay valid
        ALTER TABLE summaries_v3 RENAME TO summaries;
        CREATE INDEX facts_by_scope ON facts (scope, id);
        CREATE INDEX summaries_by_scope ON summaries (scope, id);
        {_MEMORY_TRIGGERS.format(table="facts")}
        {_MEMORY_TRIGGERS.format(table="summaries")}
        """,
    ),
    (
        "full-text index over interactions: their scrubbed text with speaker names",
        """
        -- One line per message, "speaker: text", the speaker being its name or else its role.
        -- The index keeps no copy: it reads this view, and the triggers feed it the same lines.
        CREATE VIEW interactions_text (seq, text) AS
            SELECT seq, (SELECT group_concat(
                       coalesce(json_extract(m.value, '$.name'), json_extract(m.value, '$.role'))
                       || ': ' || json_extract(m.value, '$.text'), char(10))
                   FROM json_each(CAST(messages AS TEXT)) AS m)
            FROM interactions;
        CREATE VIRTUAL TABLE interactions_fts USING fts5(
            text, content='interactions_text', content_rowid='seq',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER interactions_fts_insert AFTER INSERT ON interactions BEGIN
            INSERT INTO interactions_fts (rowid, text)
                SELECT seq, text FROM interactions_text WHERE seq = new.seq;
        END;
        CREATE TRIGGER interactions_fts_delete BEFORE DELETE ON interactions BEGIN
            INSERT INTO interactions_fts (interactions_fts, rowid, text)
                SELECT 'delete', seq, text FROM interactions_text WHERE seq = old.seq;
        END;
        -- not 'rebuild': FTS5 cannot read a view that calls json_each from inside its own
        -- update (nor run 'integrity-check' on it); this plain insert reads the same lines
        INSERT INTO interactions_fts (rowid, text) SELECT seq, text FROM interactions_text;
        """,
    ),
    (
        "distill runs count what the grounding check dropped",
        "ALTER TABLE distill_runs ADD COLUMN ungrounded INTEGER NOT NULL DEFAULT 0;",
    ),
    (
        "the structured-output mode each LLM endpoint accepted",
        """
        CREATE TABLE llm_modes (
            endpoint TEXT PRIMARY KEY,              -- the server's base URL
            mode TEXT NOT NULL,                     -- json_schema, json_object or none
            learned_at TEXT NOT NULL
        );
        """,
    ),
    (
        "validity of facts: superseded facts kept as history; the consolidation audit trail",
        """
        -- A fact is valid from its first_at; a superseded one until invalid_at (a merged
        -- duplicate never stopped being true: it has none). Current facts have no successor.
        ALTER TABLE facts ADD COLUMN invalid_at TEXT;
        ALTER TABLE facts ADD COLUMN superseded_by INTEGER;
        ALTER TABLE facts ADD COLUMN superseded_reason TEXT;
        CREATE INDEX facts_current ON facts (scope, id) WHERE superseded_by IS NULL;
        ALTER TABLE summaries ADD COLUMN condensed_into INTEGER;  -- the summary standing in for it
        CREATE INDEX summaries_current ON summaries (scope, id) WHERE condensed_into IS NULL;
        CREATE TABLE consolidation_changes (
            id INTEGER PRIMARY KEY,
            observer TEXT NOT NULL,
            run_id TEXT NOT NULL,
            scope TEXT NOT NULL,
            action TEXT NOT NULL CHECK (action IN ('merge', 'supersede', 'condense')),
            fact_id INTEGER NOT NULL,               -- retired by the change (condense: a summary)
            into_id INTEGER NOT NULL,               -- what replaces it (condense: a summary)
            reason TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX consolidation_changes_by_fact ON consolidation_changes (fact_id);
        CREATE INDEX consolidation_changes_by_into ON consolidation_changes (into_id);
        CREATE TABLE consolidation_runs (
            id INTEGER PRIMARY KEY,
            observer TEXT NOT NULL,
            run_id TEXT NOT NULL,
            model TEXT NOT NULL,
            scope TEXT NOT NULL,
            facts INTEGER NOT NULL,                 -- current facts the run considered
            changes INTEGER NOT NULL,
            llm_calls INTEGER NOT NULL,
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            ms INTEGER NOT NULL,
            ungrounded INTEGER NOT NULL,            -- texts the grounding check dropped
            created_at TEXT NOT NULL
        );
        CREATE INDEX consolidation_runs_by_observer ON consolidation_runs (observer);
        CREATE TABLE consolidation_progress (
            observer TEXT NOT NULL,
            scope TEXT NOT NULL,
            fact_id INTEGER NOT NULL,               -- the newest fact a committed run considered
            run_at TEXT NOT NULL,
            PRIMARY KEY (observer, scope)
        );
        """,
    ),
    (
        "the scope inside every full-text index, as a token a search matches with its words",
        f"""
        DROP TRIGGER facts_fts_insert;
        DROP TRIGGER facts_fts_delete;
        DROP TRIGGER facts_fts_update;
        DROP TRIGGER summaries_fts_insert;
        DROP TRIGGER summaries_fts_delete;
        DROP TRIGGER summaries_fts_update;
        DROP TRIGGER interactions_fts_insert;
        DROP TRIGGER interactions_fts_delete;
        DROP TABLE facts_fts;                       -- secure_delete zeroes the pages they held
        DROP TABLE summaries_fts;
        DROP TABLE interactions_fts;
        DROP VIEW interactions_text;
        {_SCOPED_INDEX.format(table="facts", **_AS_IS)}
        {_SCOPED_INDEX.format(table="summaries", **_AS_IS)}
        {_INTERACTIONS_VIEW}
        CREATE VIRTUAL TABLE interactions_fts USING fts5(
            text, scope, content='interactions_text', content_rowid='seq', {_INDEX_TOKENIZER}
        );
        {_RANK_BY_TEXT.format(fts="interactions_fts")};
        {_INTERACTIONS_TRIGGERS}
        INSERT INTO interactions_fts (rowid, text, scope) SELECT seq, text, scope
            FROM interactions_text;                 -- not 'rebuild': see the interactions index
        """,
    ),
    (
        "dead letters carry the scope of their interaction, like every table of per-scope rows",
        """
        ALTER TABLE dead_letters ADD COLUMN scope TEXT NOT NULL DEFAULT '';
        UPDATE dead_letters SET scope = coalesce(
            (SELECT i.scope FROM interactions AS i WHERE i.seq = dead_letters.seq), '');
        CREATE INDEX dead_letters_by_scope ON dead_letters (scope);
        """,
    ),
    (
        "a client id is unique within its scope, not across scopes",
        f"""
        -- SQLite cannot drop a column's UNIQUE: the log is copied into a table keyed by
        -- (scope, client_id), seqs and the AUTOINCREMENT high mark kept, so the full-text index
        -- (keyed by seq, over the same text) stays valid without a rebuild.
        DROP TRIGGER interactions_fts_insert;
        DROP TRIGGER interactions_fts_delete;
        DROP VIEW interactions_text;
        CREATE TABLE interactions_by_key (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- acceptance order; never reused
            client_id TEXT,                         -- idempotency key from the client
            scope TEXT NOT NULL,
            session TEXT,
            timestamp TEXT NOT NULL,
            received_at TEXT NOT NULL,
            tokens INTEGER NOT NULL,                -- estimate, for batch budgets
            messages BLOB NOT NULL,                 -- JSON, scrubbed
            metadata BLOB,                          -- JSON, scrubbed
            UNIQUE (scope, client_id)
        );
        INSERT INTO interactions_by_key SELECT seq, client_id, scope, session, timestamp,
            received_at, tokens, messages, metadata FROM interactions;
        DELETE FROM sqlite_sequence WHERE name = 'interactions_by_key';
        UPDATE sqlite_sequence SET name = 'interactions_by_key' WHERE name = 'interactions';
        DROP TABLE interactions;
        ALTER TABLE interactions_by_key RENAME TO interactions;
        CREATE INDEX interactions_by_scope ON interactions (scope);
        {_INTERACTIONS_INDEXED}
        """,
    ),
    (
        "per-item edits: facts written or pinned by a user, and the audit trail of every edit",
        """
        ALTER TABLE facts ADD COLUMN source TEXT NOT NULL DEFAULT 'distilled';  -- or 'user'
        ALTER TABLE facts ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;  -- never retired
        CREATE TABLE edits (
            id INTEGER PRIMARY KEY,
            scope TEXT NOT NULL,
            action TEXT NOT NULL,                   -- delete, correct, add, pin, unpin
            item TEXT NOT NULL,                     -- interaction, summary or fact
            item_id INTEGER NOT NULL,               -- its seq or id
            into_id INTEGER,                        -- correct: the fact the user wrote
            digest TEXT,                            -- a deleted fact's normalised text, hashed
            through_seq INTEGER NOT NULL,           -- the log's last seq when it was made
            created_at TEXT NOT NULL
        );
        CREATE INDEX edits_by_item ON edits (scope, item, item_id);
        """,
    ),
    (
        "the latest time in each block of interactions: a bound on their recency decay",
        f"""
        CREATE TABLE interaction_blocks (
            block INTEGER PRIMARY KEY,              -- seq >> {BLOCK_BITS}
            latest TEXT NOT NULL                    -- the latest timestamp of its interactions
        );
        {FILL_BLOCKS};
        CREATE TRIGGER interaction_blocks_insert AFTER INSERT ON interactions BEGIN
            INSERT INTO interaction_blocks VALUES (new.seq >> {BLOCK_BITS}, new.timestamp)
                ON CONFLICT (block) DO UPDATE SET latest = max(latest, excluded.latest);
        END;
        """,
    ),
    (
        "CJK text indexed as its characters and their overlapping pairs",
        f"""
        -- every index rebuilt: its old rows hold whole CJK runs, which a delete through the new
        -- triggers would not find
        DROP TRIGGER facts_fts_insert;
        DROP TRIGGER facts_fts_delete;
        DROP TRIGGER facts_fts_update;
        DROP TRIGGER summaries_fts_insert;
        DROP TRIGGER summaries_fts_delete;
        DROP TRIGGER summaries_fts_update;
        DROP TRIGGER interactions_fts_insert;
        DROP TRIGGER interactions_fts_delete;
        DROP TABLE facts_fts;                       -- secure_delete zeroes the pages they held
        DROP TABLE summaries_fts;
        DROP TABLE interactions_fts;
        DROP VIEW facts_text;
        DROP VIEW summaries_text;
        DROP VIEW interactions_text;
        {_SCOPED_INDEX.format(table="facts", **_GRAMS)}
        {_SCOPED_INDEX.format(table="summaries", **_GRAMS)}
        {_INTERACTIONS_TEXT.format(lines=f"{SQL_FUNCTION}({_TURN_LINES})")}
        CREATE VIRTUAL TABLE interactions_fts USING fts5(
            text, scope, content='interactions_text', content_rowid='seq', {_INDEX_TOKENIZER}
        );
        {_RANK_BY_TEXT.format(fts="interactions_fts")};
        {_INTERACTIONS_TRIGGERS}
        INSERT INTO interactions_fts (rowid, text, scope) SELECT seq, text, scope
            FROM interactions_text;                 -- not 'rebuild': see the interactions index
        """,
    ),
    (
        "vectors of interactions, facts and summaries, for recall by meaning",
        f"""
        CREATE TABLE vectors (
            id INTEGER PRIMARY KEY AUTOINCREMENT,   -- storing order: recall's index follows it
            item TEXT NOT NULL CHECK (item IN ('interaction', 'fact', 'summary')),
            item_id INTEGER NOT NULL,               -- the interaction's seq, the fact's id, ...
            scope TEXT NOT NULL,
            vector BLOB NOT NULL,                   -- forged.vectors.codec: scale and int8s
            UNIQUE (item, item_id)
        );
        CREATE INDEX vectors_by_scope ON vectors (scope);
        CREATE TABLE embed_progress (
            observer TEXT NOT NULL,
            item TEXT NOT NULL,                     -- fact or summary
            last_id INTEGER NOT NULL,               -- every one up to this id is embedded
            PRIMARY KEY (observer, item)
        );
        -- a vector leaves with what it embeds: delete, correct and forget reach it
        {_VECTOR_TRIGGER.format(table="interactions", item="interaction", key="seq")}
        {_VECTOR_TRIGGER.format(table="facts", item="fact", key="id")}
        {_VECTOR_TRIGGER.format(table="summaries", item="summary", key="id")}
        """,
    ),
)


def _grams(text: str | None) -> str | None:
    """cjk_grams as SQL calls it: NULL stays NULL."""
    return None if text is None else cjk_grams(text)


def register_functions(conn: sqlite3.Connection) -> None:
    """Define the functions the schema's views and triggers call, on one connection: every
    connection that writes the indexed tables or migrates needs them."""
    conn.create_function(SQL_FUNCTION, 1, _grams, deterministic=True)


def migrate(conn: sqlite3.Connection, upto: int = len(MIGRATIONS)) -> int:
    """Apply the missing migrations in order, up to version `upto` (all by default); return the
    schema version now in force."""
    register_functions(conn)
    done = migrations.applied(conn)
    migrations.check(done, len(MIGRATIONS))
    for version, (name, sql) in enumerate(MIGRATIONS[:upto], start=1):
        if version <= len(done):
            continue
        applied_at = now()
        record = f"INSERT INTO schema_migrations VALUES ({version}, '{name}', '{applied_at}')"
        try:  # one script, one transaction: triggers may hold semicolons of their own
            conn.executescript(f"BEGIN IMMEDIATE;\n{sql};\n{record};\nCOMMIT;")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return max(upto, len(done))
