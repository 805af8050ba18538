-- Background jobs (`store::JobStore`, hosted-agent.md "Background jobs"): durable requests for
-- model-backed work outside the Planner's conversation (JOB-01).
-- Additive: one new table.
-- Owns: one row per request. `target` names what the job updates (a document's description, say);
-- a newer request for the same target takes the next `target_generation` and supersedes the
-- older ones still pending or running. `idempotency_key` is unique per document; `fingerprint`
-- is the digest of the request's normalised input, origin, target and version, so a repeat with
-- other input is told apart. A claim names the claiming process (`claim_owner`, never an account
-- or a credential: no token is stored, JOB-09) and counts `claim_generation`, which every later
-- write of the attempt must name. `artifact` is the validated result of a completed job.

CREATE TABLE background_jobs (
    id                   TEXT PRIMARY KEY NOT NULL,
    document_id          TEXT NOT NULL REFERENCES documents (id),
    kind                 TEXT NOT NULL,
    version              BIGINT NOT NULL,
    origin               TEXT NOT NULL,
    target               TEXT NOT NULL,
    target_generation    BIGINT NOT NULL,
    idempotency_key      TEXT NOT NULL,
    fingerprint          TEXT NOT NULL,
    input                TEXT NOT NULL,
    state                TEXT NOT NULL,
    attempts             BIGINT NOT NULL DEFAULT 0,
    failures             BIGINT NOT NULL DEFAULT 0,
    max_failures         BIGINT NOT NULL,
    available_at_ms      BIGINT NOT NULL,
    claim_owner          TEXT,
    claim_generation     BIGINT NOT NULL DEFAULT 0,
    claim_expires_at_ms  BIGINT,
    progress             TEXT NOT NULL DEFAULT '[]',
    reason               TEXT,
    artifact             TEXT,
    created_at_ms        BIGINT NOT NULL,
    updated_at_ms        BIGINT NOT NULL,
    UNIQUE (document_id, idempotency_key)
);

CREATE INDEX background_jobs_due ON background_jobs (available_at_ms)
    WHERE state = 'pending';
CREATE INDEX background_jobs_target ON background_jobs (document_id, target, target_generation);
