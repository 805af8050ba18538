-- Implementation runs (`store::GraphStore`): a coding agent's claim of one graph version and its
-- progress until it ends, and the idempotency keys of the reports on it
-- (implementation-lifecycle.md, MCP lifecycle tools). Additive: two new tables.
-- Owns: one row per run, made in the same commit as the claim that locks its version; the
-- progress is JSON text the server works out (tasks, pull requests, verifications). A report's
-- key is kept with what it sent and was answered, scoped to its run (RULINGS LIFE-58).

CREATE TABLE implementation_runs (
    run_id          TEXT PRIMARY KEY,
    document_id     TEXT NOT NULL REFERENCES documents (id),
    graph_version   BIGINT NOT NULL,
    revision        BIGINT NOT NULL,
    progress        TEXT NOT NULL,
    ended           TEXT,
    started_at_ms   BIGINT NOT NULL,
    updated_at_ms   BIGINT NOT NULL
);

CREATE INDEX implementation_runs_by_document ON implementation_runs (document_id, started_at_ms);

CREATE TABLE implementation_reports (
    run_id      TEXT NOT NULL REFERENCES implementation_runs (run_id),
    key         TEXT NOT NULL,
    payload     TEXT NOT NULL,
    result      TEXT NOT NULL,
    at_ms       BIGINT NOT NULL,
    PRIMARY KEY (run_id, key)
);
