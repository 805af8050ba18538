-- Browser builds (LIFE-05, LIFE-48, LIFE-64): a person's Build plan press approves the drafted
-- graph and queues a build of it on a paired machine in the same commit; the machine's connector
-- picks it up once and claims the graph. A build moves only forward: queued, launching, then
-- claimed (with its run) or failed (with why). `machine_id` has no foreign key: unpairing the
-- machine fails its pending builds and keeps them as history.

CREATE TABLE implementation_builds (
    id                       UUID PRIMARY KEY NOT NULL,
    document_id              UUID NOT NULL REFERENCES documents (id),
    graph_version            BIGINT NOT NULL,
    machine_id               UUID NOT NULL,
    requested_by_account_id  UUID NOT NULL,
    requested_by             TEXT NOT NULL,
    checkout                 TEXT,
    state                    TEXT NOT NULL CHECK (state IN ('queued', 'launching', 'claimed', 'failed')),
    reason                   TEXT,
    run_id                   TEXT,
    created_at_ms            BIGINT NOT NULL,
    updated_at_ms            BIGINT NOT NULL
);
CREATE INDEX implementation_builds_by_machine ON implementation_builds (machine_id, state);
CREATE INDEX implementation_builds_by_document ON implementation_builds (document_id, created_at_ms);
