"""The schema of :class:`reverie.store.postgres.PostgresStore`: its migrations (DDL).

They are applied by the runner both SQL stores share (:func:`reverie.store.migrations.migrate_op`)
under an advisory lock, so any number of workers may open a fresh database at once (see
:func:`reverie.store.postgres_connections.migrate`). The row codecs are shared with SQLite
(:mod:`reverie.store.rows`); keep them in step with the latest migration.

The schema mirrors SQLite's (:mod:`reverie.store.migrations`) table for table and column for
column, with native types where PostgreSQL has them: flags are ``BOOLEAN``, timestamps
``DOUBLE PRECISION`` epoch seconds, checkpoint payloads ``BYTEA``. JSON columns stay ``TEXT``
holding ``json.dumps`` output, as in SQLite: ``jsonb`` would reorder keys, refuse ``\\u0000``
and turn ``1e100`` into an integer, and nothing queries inside them. Migrations 1–4 are
SQLite's 1–4; migration 5 (the step commit as one function, ``reverie_commit_step``) has no
SQLite counterpart (its step commit costs no round trip); migration 6 drops ``items_by_run`` on
both (SQLite's also rebuilds ``journal`` as a ``WITHOUT ROWID`` table, which PostgreSQL has no
equivalent of).
"""

from __future__ import annotations

from psycopg import AsyncConnection
from psycopg.rows import DictRow

from reverie.store.migrations import Migration
from reverie.store.sql_core import EVENTS_CHANNEL, GUARD_REFUSED

Conn = AsyncConnection[DictRow]
"""A connection of the store: rows come back as dicts keyed by column name."""


# migrations ---------------------------------------------------------------------------------
_SCOPE = """
            scope_tenant     TEXT NOT NULL,
            scope_user       TEXT NOT NULL,
            scope_agent      TEXT,
            scope_project    TEXT,"""

_V1 = Migration(
    version=1,
    name="initial schema",
    statements=(
        f"CREATE TABLE threads (thread_id TEXT PRIMARY KEY,{_SCOPE}"
        " created_at DOUBLE PRECISION NOT NULL)",
        # run_id is not a foreign key: a transcript row may name a run the store has not seen.
        """
        CREATE TABLE items (
            ref          TEXT PRIMARY KEY,
            thread_id    TEXT NOT NULL REFERENCES threads (thread_id),
            seq          BIGINT NOT NULL,
            run_id       TEXT,
            role         TEXT NOT NULL,
            content      TEXT NOT NULL,
            tool_calls   TEXT NOT NULL,
            tool_call_id TEXT,
            name         TEXT,
            input_id     TEXT,
            meta         TEXT NOT NULL,
            superseded   BOOLEAN NOT NULL DEFAULT FALSE,
            created_at   DOUBLE PRECISION NOT NULL,
            UNIQUE (thread_id, seq)
        )
        """,
        "CREATE INDEX items_by_run ON items (run_id, seq)",
        f"""
        CREATE TABLE runs (
            run_id           TEXT PRIMARY KEY,
            thread_id        TEXT NOT NULL,{_SCOPE}
            agent_name       TEXT NOT NULL,
            profile          TEXT NOT NULL,
            family_id        TEXT NOT NULL,
            status           TEXT NOT NULL,
            exit             TEXT,
            created_at       DOUBLE PRECISION NOT NULL,
            updated_at       DOUBLE PRECISION NOT NULL,
            lease_owner      TEXT,
            lease_expires_at DOUBLE PRECISION,
            fence            BIGINT NOT NULL DEFAULT 0,
            cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
            idempotency_key  TEXT UNIQUE,
            has_actor        BOOLEAN NOT NULL DEFAULT TRUE,
            meta             TEXT NOT NULL,
            inputs_sealed    BOOLEAN NOT NULL DEFAULT FALSE
        )
        """,
        "CREATE INDEX runs_by_scope ON runs (scope_tenant, scope_user, created_at, run_id)",
        "CREATE INDEX runs_by_status ON runs (status, created_at, run_id)",
        "CREATE INDEX runs_by_thread ON runs (thread_id)",
        """
        CREATE TABLE checkpoints (
            run_id     TEXT PRIMARY KEY REFERENCES runs (run_id),
            kind       TEXT NOT NULL,
            payload    BYTEA NOT NULL,
            created_at DOUBLE PRECISION NOT NULL
        )
        """,
        """
        CREATE TABLE journal (
            run_id     TEXT NOT NULL REFERENCES runs (run_id),
            call_id    TEXT NOT NULL,
            tool       TEXT NOT NULL,
            state      TEXT NOT NULL,
            outcome    TEXT,
            updated_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (run_id, call_id)
        )
        """,
        """
        CREATE TABLE inputs (
            run_id     TEXT NOT NULL REFERENCES runs (run_id),
            cursor     BIGINT NOT NULL,
            input_id   TEXT NOT NULL,
            kind       TEXT NOT NULL,
            payload    TEXT NOT NULL,
            acked      BOOLEAN NOT NULL DEFAULT FALSE,
            created_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (run_id, cursor),
            UNIQUE (run_id, input_id)
        )
        """,
        f"""
        CREATE TABLE gates (
            ref              TEXT PRIMARY KEY,
            run_id           TEXT NOT NULL REFERENCES runs (run_id),
            call_id          TEXT NOT NULL,
            tool             TEXT NOT NULL,
            arguments        TEXT NOT NULL,
            kind             TEXT NOT NULL,
            status           TEXT NOT NULL,
            reason           TEXT,{_SCOPE}
            created_at       DOUBLE PRECISION NOT NULL,
            resolved_at      DOUBLE PRECISION,
            UNIQUE (run_id, call_id)
        )
        """,
        "CREATE INDEX gates_by_status ON gates (status, created_at, ref)",
        "CREATE INDEX gates_by_scope ON gates (scope_tenant, scope_user, created_at, ref)",
    ),
)

# Memory tables store an unset agent/project as '' (not NULL) so the scope can be part of a
# primary key, as in SQLite.
_MEMORY_SCOPE = """
            scope_tenant  TEXT NOT NULL,
            scope_user    TEXT NOT NULL,
            scope_agent   TEXT NOT NULL,
            scope_project TEXT NOT NULL,"""
_MEMORY_KEY = "scope_tenant, scope_user, scope_agent, scope_project"

_V2 = Migration(
    version=2,
    name="memory: documents, versions, daily log, full-text index, curation passes",
    statements=(
        f"""
        CREATE TABLE memory_documents ({_MEMORY_SCOPE}
            path          TEXT NOT NULL,
            text          TEXT NOT NULL,
            version       BIGINT NOT NULL,
            updated_at    DOUBLE PRECISION NOT NULL,
            PRIMARY KEY ({_MEMORY_KEY}, path)
        )
        """,
        f"""
        CREATE TABLE memory_document_versions ({_MEMORY_SCOPE}
            path          TEXT NOT NULL,
            version       BIGINT NOT NULL,
            text          TEXT NOT NULL,
            created_at    DOUBLE PRECISION NOT NULL,
            PRIMARY KEY ({_MEMORY_KEY}, path, version)
        )
        """,
        # What search reads: log entries (kind 'log', ref = the day) and the current text of
        # each document (kind 'document', ref = its path, updated in place on every write).
        # The 'simple' configuration lower-cases and neither stems nor drops stop words, like
        # SQLite's unicode61 tokenizer; stop words are dropped from queries (search_terms).
        f"""
        CREATE TABLE memory_entries (
            id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,{_MEMORY_SCOPE}
            kind          TEXT NOT NULL,
            ref           TEXT NOT NULL,
            body          TEXT NOT NULL,
            created_at    DOUBLE PRECISION NOT NULL,
            body_tsv      TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, body))
                          STORED
        )
        """,
        f"CREATE INDEX memory_entries_by_ref ON memory_entries ({_MEMORY_KEY}, kind, ref, id)",
        "CREATE INDEX memory_entries_fts ON memory_entries USING GIN (body_tsv)",
        f"""
        CREATE TABLE memory_passes (
            pass_id       TEXT PRIMARY KEY,{_MEMORY_SCOPE}
            run_id        TEXT NOT NULL,
            report        TEXT NOT NULL,
            created_at    DOUBLE PRECISION NOT NULL
        )
        """,
        f"CREATE INDEX memory_passes_by_scope ON memory_passes ({_MEMORY_KEY}, created_at)",
    ),
)

_V3 = Migration(
    version=3,
    name="run events: each run's typed events, replayable from any process",
    statements=(
        """
        CREATE TABLE run_events (
            run_id      TEXT NOT NULL,
            seq         BIGINT NOT NULL,
            kind        TEXT NOT NULL,
            data        TEXT NOT NULL,
            created_at  DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (run_id, seq)
        )
        """,
    ),
)

_V4 = Migration(
    version=4,
    name="memory: completed-turn counts per owner (curation cadence)",
    statements=(
        """
        CREATE TABLE memory_turn_counts (
            scope_tenant  TEXT NOT NULL,
            scope_user    TEXT NOT NULL,
            turns         BIGINT NOT NULL,
            updated_at    DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (scope_tenant, scope_user)
        )
        """,
    ),
)

# A step commit as one statement (reverie.store.sql_ops.commit_step): the client sends one
# prepared call instead of a pipeline of locks, a guard and a write per table, each of which
# costs the client a send and the server a parse. The steps and their order are those of the
# pipeline it replaces: the thread's row lock, then the run's; the checks (read after both
# locks: each statement of a VOLATILE function takes a fresh snapshot, so rows committed by
# the transactions the locks waited for are seen); the journal records in order, the items,
# then, unless an input waits past the guard cursor, the checkpoint, the ack and the seal.
# A check that fails raises the guard's error (sql_core.GUARD_REFUSED) before any write, so
# the caller runs the checks again in Python to raise the precise error. The rows travel as
# JSON arrays of objects keyed by column (one parameter however many rows; psycopg dumps a
# list parameter element by element, ten times slower).
_STEP_FUNCTION = f"""
CREATE FUNCTION reverie_commit_step(
    p_run_id TEXT, p_thread_id TEXT, p_fence BIGINT, p_after_seq BIGINT, p_placed BOOLEAN,
    p_items JSON, p_journal JSON, p_kind TEXT, p_payload BYTEA, p_ack BIGINT, p_seal BOOLEAN,
    p_guard_cursor BIGINT, p_now DOUBLE PRECISION,
    OUT head BIGINT, OUT top_cursor BIGINT, OUT cancel_requested BOOLEAN
) LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    v_thread BOOLEAN;
    v_fence BIGINT;
    j RECORD;
BEGIN
    SELECT TRUE INTO v_thread FROM threads WHERE thread_id = p_thread_id FOR NO KEY UPDATE;
    SELECT r.fence, r.cancel_requested INTO v_fence, cancel_requested
        FROM runs AS r WHERE r.run_id = p_run_id FOR NO KEY UPDATE;
    SELECT COALESCE(MAX(seq), 0) INTO head FROM items WHERE thread_id = p_thread_id;
    IF v_thread IS NULL OR v_fence IS DISTINCT FROM p_fence OR (
        p_items IS NOT NULL AND (head IS DISTINCT FROM p_after_seq OR NOT p_placed)
    ) THEN
        RAISE EXCEPTION '{GUARD_REFUSED}' USING ERRCODE = 'invalid_text_representation';
    END IF;
    SELECT COALESCE(MAX(cursor), 0) INTO top_cursor FROM inputs WHERE run_id = p_run_id;
    IF p_journal IS NOT NULL THEN
        FOR j IN
            SELECT e.v ->> 'call_id' AS call_id, e.v ->> 'tool' AS tool,
                   e.v ->> 'state' AS state, e.v ->> 'outcome' AS outcome
            FROM json_array_elements(p_journal) WITH ORDINALITY AS e (v, n)
            ORDER BY e.n
        LOOP
            IF j.state = 'started' THEN
                INSERT INTO journal (run_id, call_id, tool, state, outcome, updated_at)
                VALUES (p_run_id, j.call_id, j.tool, 'started', j.outcome, p_now)
                ON CONFLICT (run_id, call_id) DO NOTHING;
            ELSE
                INSERT INTO journal AS old (run_id, call_id, tool, state, outcome, updated_at)
                VALUES (p_run_id, j.call_id, j.tool, 'finished', j.outcome, p_now)
                ON CONFLICT (run_id, call_id) DO UPDATE
                SET state = 'finished', outcome = excluded.outcome,
                    updated_at = excluded.updated_at,
                    tool = CASE WHEN excluded.tool = '' THEN old.tool ELSE excluded.tool END;
            END IF;
        END LOOP;
    END IF;
    IF p_items IS NOT NULL THEN
        INSERT INTO items (ref, thread_id, seq, run_id, role, content, tool_calls,
                           tool_call_id, name, input_id, meta, superseded, created_at)
        SELECT u.ref, p_thread_id, u.seq, p_run_id, u.role, u.content, u.tool_calls,
               u.tool_call_id, u.name, u.input_id, u.meta, u.superseded, p_now
        FROM json_populate_recordset(NULL::items, p_items) AS u;
    END IF;
    IF p_guard_cursor IS NOT NULL AND top_cursor > p_guard_cursor THEN
        RETURN;  -- an input waits: the loop reads it before this boundary is checkpointed
    END IF;
    IF p_payload IS NOT NULL THEN
        INSERT INTO checkpoints (run_id, kind, payload, created_at)
        VALUES (p_run_id, p_kind, p_payload, p_now)
        ON CONFLICT (run_id) DO UPDATE SET kind = excluded.kind, payload = excluded.payload,
            created_at = excluded.created_at;
    END IF;
    IF p_ack IS NOT NULL THEN
        UPDATE inputs SET acked = TRUE WHERE run_id = p_run_id AND cursor <= p_ack AND NOT acked;
    END IF;
    IF p_seal THEN
        UPDATE runs SET inputs_sealed = TRUE WHERE run_id = p_run_id;
    END IF;
END
$body$
"""

_V5 = Migration(
    version=5,
    name="the step commit as one statement (reverie_commit_step)",
    statements=(_STEP_FUNCTION,),
)

_V6 = Migration(
    version=6,
    name="fewer indexes per step commit: no items_by_run",
    # SQLite's migration 6 also rebuilds journal keyed by its primary key; a PostgreSQL table
    # is a heap plus its indexes either way, so only the unused index goes.
    statements=("DROP INDEX IF EXISTS items_by_run",),
)

# An event flush as one statement (reverie.store.sql_ops.append_event_batches): the locks of
# the flush's runs in the caller's order (so two appenders never wait for each other in a
# cycle), then, each statement of a VOLATILE function taking a fresh snapshot, every run's
# last seq as the transactions those locks waited for left it, the rows numbered after it,
# the bound (the newest p_keep of each run), and a NOTIFY for each run. The event log is best
# effort: its transaction does not wait for the WAL flush (the run's next step commit makes
# it). The rows travel as one JSON array, each numbered 1, 2, ... within its run.
_EVENTS_FUNCTION = f"""
CREATE FUNCTION reverie_append_events(
    p_runs TEXT[], p_counts BIGINT[], p_rows JSON, p_keep BIGINT
) RETURNS TABLE (run_id TEXT, last BIGINT)
LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    v_run TEXT;
    v_tops BIGINT[];
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    FOREACH v_run IN ARRAY p_runs LOOP
        PERFORM pg_advisory_xact_lock(hashtext(v_run));
    END LOOP;
    SELECT array_agg(
        COALESCE((SELECT MAX(e.seq) FROM run_events AS e WHERE e.run_id = v.id), 0)
        ORDER BY v.n
    ) INTO v_tops
    FROM unnest(p_runs) WITH ORDINALITY AS v (id, n);
    INSERT INTO run_events (run_id, seq, kind, data, created_at)
    SELECT u.run_id, t.top + u.seq, u.kind, u.data, u.created_at
    FROM json_populate_recordset(NULL::run_events, p_rows) AS u
    JOIN unnest(p_runs, v_tops) AS t (id, top) ON t.id = u.run_id;
    DELETE FROM run_events AS e
    USING unnest(p_runs, v_tops, p_counts) AS t (id, top, k)
    WHERE e.run_id = t.id AND t.top + t.k > p_keep AND e.seq <= t.top + t.k - p_keep;
    PERFORM pg_notify('{EVENTS_CHANNEL}', v.id) FROM unnest(p_runs) AS v (id);
    RETURN QUERY SELECT t.id, t.top + t.k FROM unnest(p_runs, v_tops, p_counts) AS t (id, top, k);
END
$body$
"""

_V7 = Migration(
    version=7,
    name="an event flush as one statement (reverie_append_events)",
    statements=(_EVENTS_FUNCTION,),
)

_V8 = Migration(
    version=8,
    name="gates: who resolved, digests of the arguments shown and approved, edited arguments",
    statements=(
        "ALTER TABLE gates ADD COLUMN resolved_by TEXT",
        "ALTER TABLE gates ADD COLUMN shown_digest TEXT",
        "ALTER TABLE gates ADD COLUMN approved_digest TEXT",
        "ALTER TABLE gates ADD COLUMN edited_arguments TEXT",
    ),
)


_V9 = Migration(
    version=9,
    name="schedules and their claimed occurrences",
    statements=(
        """
        CREATE TABLE schedules (
            name          TEXT PRIMARY KEY,
            scope_tenant  TEXT NOT NULL,
            scope_user    TEXT NOT NULL,
            scope_agent   TEXT NOT NULL,
            scope_project TEXT NOT NULL,
            spec          TEXT NOT NULL,
            next_at       DOUBLE PRECISION NOT NULL,
            paused        INTEGER NOT NULL DEFAULT 0,
            created_at    DOUBLE PRECISION NOT NULL
        )
        """,
        # One row per claimed occurrence: the primary key is what makes a claim exactly once
        # (the claim writes it in the transaction that advances schedules.next_at).
        """
        CREATE TABLE schedule_occurrences (
            name       TEXT NOT NULL REFERENCES schedules (name),
            occurs_at  DOUBLE PRECISION NOT NULL,
            run_key    TEXT NOT NULL,
            status     TEXT NOT NULL,
            run_id     TEXT,
            claimed_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (name, occurs_at)
        )
        """,
    ),
)

MIGRATIONS: tuple[Migration, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9)
"""Every migration, oldest first. Never edit one that has shipped; append the next."""

SCHEMA_VERSION: int = MIGRATIONS[-1].version
"""The newest schema this build knows; a database recording a higher one is refused."""
