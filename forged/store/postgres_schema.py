"""PostgreSQL schema: numbered migrations, each applied once in its own transaction and recorded.

The numbering is PostgreSQL's own: version 1 is the whole SQLite schema of versions 1-6 in one
step, version 2 is SQLite's 7. Every table of a scope's rows carries `scope`, and every query of
them filters by it, so a distributed PostgreSQL can shard them by scope. A unique index holds a
digest of a text that can be long (a fact's, a client id), never the text itself: a btree row
holds at most BTREE_ROW_BYTES.
"""

from __future__ import annotations

from typing import Any

from forged.store import migrations
from forged.store.cjk import CJK_RUN, SQL_FUNCTION
from forged.store.portable import TEXT_KEY
from forged.timestamps import now

__all__ = [
    "BTREE_ROW_BYTES",
    "MEMORY_LOCK",
    "MIGRATIONS",
    "MIGRATION_LOCK",
    "SEARCH_FALLBACK_CHARS",
    "SEARCH_FUNCTION",
    "SEARCH_SAFE_BYTES",
    "TEXT_SEARCH",
    "migrate",
]

MIGRATION_LOCK = 0x666F7267  # advisory lock: one daemon at a time migrates a shared database
# Advisory lock keys of the memory barrier: every insert of facts or summaries holds it shared
# until it commits, a read past the last id read holds it alone (forged.store.cursors).
MEMORY_LOCK = (0x666F726A, 0)
TEXT_SEARCH = "english"  # stemming and stop words, as FTS5's porter tokenizer does
_ID = "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY"  # never reused: cursors stay valid
BTREE_ROW_BYTES = 2704  # the largest row a btree index takes (a third of an 8 KiB page)
SEARCH_FUNCTION = "search_vector"  # SQL function: the tsvector a text is searched by
# A text of this many bytes never overflows a tsvector (1 MB): its worst, random CJK, takes
# about 6.3 bytes of tsvector a byte; a longer one is tried, and on overflow searched by its
# first SEARCH_FALLBACK_CHARS characters (at most about 760 KB of tsvector).
SEARCH_SAFE_BYTES = 120_000
SEARCH_FALLBACK_CHARS = 40_000

# A vector leaves with what it embeds: delete, correct and forget reach it.
_VECTOR_TRIGGER = """CREATE FUNCTION {table}_vector_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM vectors WHERE item = '{item}' AND item_id = OLD.{key};
            RETURN OLD;
        END $$;
        CREATE TRIGGER {table}_vector_delete AFTER DELETE ON {table}
            FOR EACH ROW EXECUTE FUNCTION {table}_vector_delete();"""

# Each entry is one schema version; append, never edit a released one.
MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "log, results, watermarks, dead letters, distill runs, LLM modes, full-text search",
        f"""
        CREATE TABLE interactions (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- acceptance order
            client_id text UNIQUE,                  -- idempotency key from the client
            scope text NOT NULL,
            session text,
            timestamp text NOT NULL,
            received_at text NOT NULL,
            tokens integer NOT NULL,                -- estimate, for batch budgets
            messages bytea NOT NULL,                -- JSON, scrubbed
            metadata bytea,                         -- JSON, scrubbed
            search tsvector NOT NULL                -- set by the trigger below
        );
        -- One line per message, "speaker: text", the speaker being its name or else its role.
        CREATE FUNCTION interactions_search() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.search := to_tsvector('{TEXT_SEARCH}', coalesce((
                SELECT string_agg(coalesce(m->>'name', m->>'role') || ': ' || (m->>'text'), E'\n')
                FROM jsonb_array_elements(convert_from(NEW.messages, 'UTF8')::jsonb) AS m), ''));
            RETURN NEW;
        END $$;
        CREATE TRIGGER interactions_search BEFORE INSERT ON interactions
            FOR EACH ROW EXECUTE FUNCTION interactions_search();
        CREATE INDEX interactions_by_scope ON interactions (scope, seq);
        CREATE INDEX interactions_search ON interactions USING gin (search);
        CREATE TABLE summaries (
            {_ID},
            observer text NOT NULL,
            batch_id text NOT NULL,
            scope text NOT NULL,
            session text,
            text text NOT NULL,
            first_seq bigint NOT NULL,
            last_seq bigint NOT NULL,
            first_at text NOT NULL,                 -- timestamp of the first source interaction
            last_at text NOT NULL,                  -- timestamp of the last source interaction
            created_at text NOT NULL,               -- when it was distilled
            search tsvector GENERATED ALWAYS AS (to_tsvector('{TEXT_SEARCH}', text)) STORED
        );
        CREATE INDEX summaries_by_scope ON summaries (scope, id);
        CREATE INDEX summaries_search ON summaries USING gin (search);
        CREATE TABLE facts (
            {_ID},
            kind text NOT NULL CHECK (kind IN
                ('decision', 'correction', 'preference', 'state', 'event', 'profile')),
            text text NOT NULL,
            norm text NOT NULL,                     -- normalised text, for de-duplication
            scope text NOT NULL,
            session text,
            batch_id text NOT NULL,
            first_seq bigint NOT NULL,
            last_seq bigint NOT NULL,
            first_at text NOT NULL,
            last_at text NOT NULL,
            created_at text NOT NULL,
            seen_count integer NOT NULL DEFAULT 1,
            last_seen_at text NOT NULL,
            search tsvector GENERATED ALWAYS AS (to_tsvector('{TEXT_SEARCH}', text)) STORED,
            UNIQUE (scope, kind, norm)
        );
        CREATE INDEX facts_by_scope ON facts (scope, id);
        CREATE INDEX facts_search ON facts USING gin (search);
        CREATE TABLE watermarks (
            observer text PRIMARY KEY,
            seq bigint NOT NULL                     -- every seq <= this is done for the observer
        );
        CREATE TABLE dead_letters (
            {_ID},
            observer text NOT NULL,
            scope text NOT NULL,
            seq bigint NOT NULL,
            reason text NOT NULL,
            raw text,                               -- the model's last answer, if any
            created_at text NOT NULL,
            resolved_at text
        );
        CREATE INDEX dead_letters_open ON dead_letters (observer, seq) WHERE resolved_at IS NULL;
        CREATE INDEX dead_letters_by_scope ON dead_letters (scope);
        CREATE TABLE distill_runs (
            {_ID},
            observer text NOT NULL,
            batch_id text NOT NULL,
            model text NOT NULL,
            scope text NOT NULL,
            interactions integer NOT NULL,
            first_seq bigint NOT NULL,
            last_seq bigint NOT NULL,
            llm_calls integer NOT NULL,
            prompt_tokens integer NOT NULL,
            completion_tokens integer NOT NULL,
            ms integer NOT NULL,
            outcome text NOT NULL,                  -- committed, dead_letter, redistilled
            error text,
            created_at text NOT NULL,
            ungrounded integer NOT NULL DEFAULT 0
        );
        CREATE INDEX distill_runs_by_observer ON distill_runs (observer);
        CREATE INDEX distill_runs_by_scope ON distill_runs (scope);
        CREATE TABLE llm_modes (
            endpoint text PRIMARY KEY,              -- the server's base URL
            mode text NOT NULL,                     -- json_schema, json_object or none
            learned_at text NOT NULL
        );
        """,
    ),
    (
        "validity of facts: superseded facts kept as history; the consolidation audit trail",
        f"""
        ALTER TABLE facts ADD COLUMN invalid_at text;
        ALTER TABLE facts ADD COLUMN superseded_by bigint;
        ALTER TABLE facts ADD COLUMN superseded_reason text;
        CREATE INDEX facts_current ON facts (scope, id) WHERE superseded_by IS NULL;
        ALTER TABLE summaries ADD COLUMN condensed_into bigint;
        CREATE INDEX summaries_current ON summaries (scope, id) WHERE condensed_into IS NULL;
        CREATE TABLE consolidation_changes (
            {_ID},
            observer text NOT NULL,
            run_id text NOT NULL,
            scope text NOT NULL,
            action text NOT NULL CHECK (action IN ('merge', 'supersede', 'condense')),
            fact_id bigint NOT NULL,
            into_id bigint NOT NULL,
            reason text NOT NULL,
            created_at text NOT NULL
        );
        CREATE INDEX consolidation_changes_by_fact ON consolidation_changes (fact_id);
        CREATE INDEX consolidation_changes_by_into ON consolidation_changes (into_id);
        CREATE TABLE consolidation_runs (
            {_ID},
            observer text NOT NULL,
            run_id text NOT NULL,
            model text NOT NULL,
            scope text NOT NULL,
            facts integer NOT NULL,
            changes integer NOT NULL,
            llm_calls integer NOT NULL,
            prompt_tokens integer NOT NULL,
            completion_tokens integer NOT NULL,
            ms integer NOT NULL,
            ungrounded integer NOT NULL,
            created_at text NOT NULL
        );
        CREATE INDEX consolidation_runs_by_observer ON consolidation_runs (observer);
        CREATE TABLE consolidation_progress (
            observer text NOT NULL,
            scope text NOT NULL,
            fact_id bigint NOT NULL,
            run_at text NOT NULL,
            PRIMARY KEY (observer, scope)
        );
        """,
    ),
    (
        "a client id is unique within its scope, not across scopes",
        """
        ALTER TABLE interactions DROP CONSTRAINT interactions_client_id_key;
        ALTER TABLE interactions ADD CONSTRAINT interactions_scope_client_id_key
            UNIQUE (scope, client_id);
        """,
    ),
    (
        "per-item edits: facts written or pinned by a user, and the audit trail of every edit",
        f"""
        ALTER TABLE facts ADD COLUMN source text NOT NULL DEFAULT 'distilled';
        ALTER TABLE facts ADD COLUMN pinned integer NOT NULL DEFAULT 0;
        CREATE TABLE edits (
            {_ID},
            scope text NOT NULL,
            action text NOT NULL,
            item text NOT NULL,
            item_id bigint NOT NULL,
            into_id bigint,
            digest text,
            through_seq bigint NOT NULL,
            created_at text NOT NULL
        );
        CREATE INDEX edits_by_item ON edits (scope, item, item_id);
        """,
    ),
    (
        "CJK text indexed as its characters and their overlapping pairs",
        f"""
        -- forged.store.cjk in SQL: the runs set apart by spaces, then each run's characters and
        -- overlapping pairs (the same words as on SQLite; their order matters to no query)
        CREATE FUNCTION {SQL_FUNCTION}(t text) RETURNS text
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
            SELECT regexp_replace(t, '{CJK_RUN}', ' ', 'g')
                || coalesce(' ' || string_agg(c || coalesce(' ' || c || next, ''), ' '), '')
            FROM (SELECT c, lead(c) OVER (PARTITION BY r ORDER BY n) AS next
                  FROM regexp_matches(t, '{CJK_RUN}', 'g') WITH ORDINALITY AS m (run, r),
                       unnest(regexp_split_to_array(m.run[1], '')) WITH ORDINALITY AS u (c, n)
                 ) AS grams
        $$;
        -- One line per message, "speaker: text", the speaker being its name or else its role.
        CREATE FUNCTION turn_lines(messages bytea) RETURNS text
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
            SELECT coalesce(string_agg(coalesce(m->>'name', m->>'role') || ': ' || (m->>'text'),
                                       E'\\n'), '')
            FROM jsonb_array_elements(convert_from(messages, 'UTF8')::jsonb) AS m
        $$;
        CREATE OR REPLACE FUNCTION interactions_search() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.search := to_tsvector('{TEXT_SEARCH}', {SQL_FUNCTION}(turn_lines(NEW.messages)));
            RETURN NEW;
        END $$;
        UPDATE interactions
            SET search = to_tsvector('{TEXT_SEARCH}', {SQL_FUNCTION}(turn_lines(messages)));
        ALTER TABLE summaries DROP COLUMN search;  -- with its index
        ALTER TABLE summaries ADD COLUMN search tsvector GENERATED ALWAYS AS
            (to_tsvector('{TEXT_SEARCH}', {SQL_FUNCTION}(text))) STORED;
        CREATE INDEX summaries_search ON summaries USING gin (search);
        ALTER TABLE facts DROP COLUMN search;
        ALTER TABLE facts ADD COLUMN search tsvector GENERATED ALWAYS AS
            (to_tsvector('{TEXT_SEARCH}', {SQL_FUNCTION}(text))) STORED;
        CREATE INDEX facts_search ON facts USING gin (search);
        """,
    ),
    (
        "a fact's normalised text and a client id unique by their digests, of any length",
        f"""
        -- A btree row holds at most {BTREE_ROW_BYTES} bytes: a fact (a picked line) or a
        -- client id (512 characters of 4 bytes, beside a scope of as many) can be longer. The
        -- digest of UTF-8 text never changes; convert_to is only stable for a conversion's lookup.
        CREATE FUNCTION {TEXT_KEY}(t text) RETURNS bytea
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
            SELECT sha256(convert_to(t, 'UTF8'))
        $$;
        ALTER TABLE facts DROP CONSTRAINT facts_scope_kind_norm_key;
        CREATE UNIQUE INDEX facts_scope_kind_norm_key ON facts (scope, kind, {TEXT_KEY}(norm));
        ALTER TABLE interactions DROP CONSTRAINT interactions_scope_client_id_key;
        CREATE UNIQUE INDEX interactions_scope_client_id_key
            ON interactions (scope, {TEXT_KEY}(client_id));
        """,
    ),
    (
        "vectors of interactions, facts and summaries, for recall by meaning",
        f"""
        CREATE TABLE vectors (
            {_ID},                                  -- storing order: recall's index follows it
            item text NOT NULL CHECK (item IN ('interaction', 'fact', 'summary')),
            item_id bigint NOT NULL,
            scope text NOT NULL,
            vector bytea NOT NULL,                  -- forged.vectors.codec: scale and int8s
            UNIQUE (item, item_id)
        );
        CREATE INDEX vectors_by_scope ON vectors (scope);
        CREATE TABLE embed_progress (
            observer text NOT NULL,
            item text NOT NULL,
            last_id bigint NOT NULL,
            PRIMARY KEY (observer, item)
        );
        {_VECTOR_TRIGGER.format(table="interactions", item="interaction", key="seq")}
        {_VECTOR_TRIGGER.format(table="facts", item="fact", key="id")}
        {_VECTOR_TRIGGER.format(table="summaries", item="summary", key="id")}
        """,
    ),
    (
        "a text whose words overflow a tsvector is searchable by its start, never refused",
        f"""
        -- A tsvector holds at most 1 MB: 60,000 CJK characters (each also paired with the next)
        -- or 700,000 of distinct words overflow it, and the insert failed, with every request
        -- committed in its group. Up to {SEARCH_SAFE_BYTES} bytes none can; past them a text
        -- that overflows is searched by its first {SEARCH_FALLBACK_CHARS} characters.
        CREATE FUNCTION {SEARCH_FUNCTION}(t text) RETURNS tsvector
            LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
        BEGIN
            IF octet_length(t) <= {SEARCH_SAFE_BYTES} THEN
                RETURN to_tsvector('{TEXT_SEARCH}', {SQL_FUNCTION}(t));
            END IF;
            BEGIN
                RETURN to_tsvector('{TEXT_SEARCH}', {SQL_FUNCTION}(t));
            EXCEPTION WHEN program_limit_exceeded THEN
                RETURN to_tsvector('{TEXT_SEARCH}',
                                   {SQL_FUNCTION}(left(t, {SEARCH_FALLBACK_CHARS})));
            END;
        END $$;
        CREATE OR REPLACE FUNCTION interactions_search() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.search := {SEARCH_FUNCTION}(turn_lines(NEW.messages));
            RETURN NEW;
        END $$;
        ALTER TABLE summaries DROP COLUMN search;  -- with its index
        ALTER TABLE summaries ADD COLUMN search tsvector GENERATED ALWAYS AS
            ({SEARCH_FUNCTION}(text)) STORED;
        CREATE INDEX summaries_search ON summaries USING gin (search);
        ALTER TABLE facts DROP COLUMN search;
        ALTER TABLE facts ADD COLUMN search tsvector GENERATED ALWAYS AS
            ({SEARCH_FUNCTION}(text)) STORED;
        CREATE INDEX facts_search ON facts USING gin (search);
        """,
    ),
    (
        "facts and summaries inserted behind the memory barrier: their ids are read in order",
        f"""
        -- An id is taken at the insert and seen at the commit: without the barrier a smaller
        -- one could commit after a larger one was read, and a reader past it never saw it.
        CREATE FUNCTION memory_barrier() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_advisory_xact_lock_shared({MEMORY_LOCK[0]}, {MEMORY_LOCK[1]});
            RETURN NULL;
        END $$;
        CREATE TRIGGER facts_barrier BEFORE INSERT ON facts
            FOR EACH STATEMENT EXECUTE FUNCTION memory_barrier();
        CREATE TRIGGER summaries_barrier BEFORE INSERT ON summaries
            FOR EACH STATEMENT EXECUTE FUNCTION memory_barrier();
        """,
    ),
)


def migrate(conn: Any) -> int:
    """Apply the missing migrations in order; return the schema version now in force.

    `conn` is a psycopg connection in autocommit mode. Daemons starting together on one
    database take turns: the advisory lock is held until the transaction ends.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        migrations.check(migrations.applied(conn), len(MIGRATIONS))
    for version, (name, sql) in enumerate(MIGRATIONS, start=1):
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            if version in migrations.applied(conn):  # another daemon applied it meanwhile
                continue
            conn.execute(sql)
            conn.execute(
                "INSERT INTO schema_migrations VALUES (%s, %s, %s)", (version, name, now())
            )
    return len(MIGRATIONS)
