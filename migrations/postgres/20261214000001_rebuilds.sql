-- Rebuilds and the built source (LIFE-10..14, LIFE-86, LIFE-87): a build is now of a kind — a
-- first build of an approved graph, or a rebuild of the edits made since the document's built
-- source — and a rebuild can land. A pending rebuild keeps its before and after sources; an
-- ended one keeps none. Additive: existing rows are first builds.

ALTER TABLE implementation_builds
    ADD COLUMN kind TEXT NOT NULL DEFAULT 'build' CHECK (kind IN ('build', 'rebuild')),
    ADD COLUMN before_source TEXT,
    ADD COLUMN after_source TEXT,
    ADD COLUMN after_plan_revision BIGINT,
    DROP CONSTRAINT implementation_builds_state_check,
    ADD CONSTRAINT implementation_builds_state_check
        CHECK (state IN ('queued', 'launching', 'claimed', 'failed', 'landed'));
CREATE INDEX implementation_builds_by_state ON implementation_builds (state, updated_at_ms);

CREATE TABLE built_sources (
    document_id     UUID PRIMARY KEY NOT NULL REFERENCES documents (id),
    build_id        UUID NOT NULL,
    plan_revision   BIGINT NOT NULL,
    source          TEXT NOT NULL,
    recorded_at_ms  BIGINT NOT NULL
);
