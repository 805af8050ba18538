-- Rebuilds and the built source (LIFE-10..14, LIFE-86, LIFE-87): a build is now of a kind — a
-- first build of an approved graph, or a rebuild of the edits made since the document's built
-- source — and a rebuild can land. A pending rebuild keeps its before and after sources; an
-- ended one keeps none. SQLite cannot widen a CHECK in place, so the table is made again with
-- every row copied as a first build.

CREATE TABLE implementation_builds_next (
    id                       TEXT PRIMARY KEY NOT NULL,
    document_id              TEXT NOT NULL REFERENCES documents (id),
    kind                     TEXT NOT NULL DEFAULT 'build' CHECK (kind IN ('build', 'rebuild')),
    graph_version            INTEGER NOT NULL,
    machine_id               TEXT NOT NULL,
    requested_by_account_id  TEXT NOT NULL,
    requested_by             TEXT NOT NULL,
    checkout                 TEXT,
    state                    TEXT NOT NULL CHECK (state IN ('queued', 'launching', 'claimed', 'failed', 'landed')),
    reason                   TEXT,
    run_id                   TEXT,
    before_source            TEXT,
    after_source             TEXT,
    after_plan_revision      INTEGER,
    bridge_digest            TEXT,
    created_at_ms            INTEGER NOT NULL,
    updated_at_ms            INTEGER NOT NULL
);
INSERT INTO implementation_builds_next (id, document_id, kind, graph_version, machine_id,
    requested_by_account_id, requested_by, checkout, state, reason, run_id, bridge_digest,
    created_at_ms, updated_at_ms)
SELECT id, document_id, 'build', graph_version, machine_id, requested_by_account_id,
    requested_by, checkout, state, reason, run_id, bridge_digest, created_at_ms, updated_at_ms
FROM implementation_builds;
DROP TABLE implementation_builds;
ALTER TABLE implementation_builds_next RENAME TO implementation_builds;
CREATE INDEX implementation_builds_by_machine ON implementation_builds (machine_id, state);
CREATE INDEX implementation_builds_by_document ON implementation_builds (document_id, created_at_ms);
CREATE UNIQUE INDEX implementation_builds_by_bridge ON implementation_builds (bridge_digest);
CREATE INDEX implementation_builds_by_state ON implementation_builds (state, updated_at_ms);

CREATE TABLE built_sources (
    document_id     TEXT PRIMARY KEY NOT NULL REFERENCES documents (id),
    build_id        TEXT NOT NULL,
    plan_revision   INTEGER NOT NULL,
    source          TEXT NOT NULL,
    recorded_at_ms  INTEGER NOT NULL
);
