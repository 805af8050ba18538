-- Workflow runs a Planner client reports, and every stage of each, kept with the document so a
-- reload or a restart shows them (`store::RunStore`). Additive: two new tables.
-- Owns:
-- * `workflow_runs`: one row per reported run, its card as last reported; `position` keeps the
--   order runs were first reported in. Ended rows stay until the next workflow starts in the
--   document; a run live when the server stopped is marked `stopped` at the next startup.
-- * `workflow_run_stages`: every stage of a run, with no count limit, merged by `stage_id`;
--   `position` keeps the order stages were first reported in, which the paged stages route
--   serves.

CREATE TABLE workflow_runs (
    document_id     TEXT NOT NULL REFERENCES documents (id),
    run_id          TEXT NOT NULL,
    position        BIGINT NOT NULL,
    session_id      TEXT NOT NULL,
    name            TEXT NOT NULL,
    status          TEXT NOT NULL,
    root_run_id     TEXT,
    elapsed_ms      BIGINT,
    omitted_stages  BIGINT NOT NULL,
    reported_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (document_id, run_id)
);

CREATE TABLE workflow_run_stages (
    document_id      TEXT NOT NULL,
    run_id           TEXT NOT NULL,
    stage_id         TEXT NOT NULL,
    position         BIGINT NOT NULL,
    name             TEXT NOT NULL,
    status           TEXT NOT NULL,
    parent_stage_id  TEXT,
    duration_ms      BIGINT,
    PRIMARY KEY (document_id, run_id, stage_id),
    FOREIGN KEY (document_id, run_id) REFERENCES workflow_runs (document_id, run_id)
);

CREATE INDEX workflow_run_stages_order ON workflow_run_stages (document_id, run_id, position);
