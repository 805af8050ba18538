-- Implementation graphs (`store::GraphStore`): each version of a document's dependency graph,
-- its three counters and its state (implementation-lifecycle.md, graph states and counters).
-- Additive: one new table.
-- Owns: one row per (document, graphVersion); the definition (ordered tasks, dependency edges,
-- acceptance criteria) is JSON text the server checks before saving. None of these counters is a
-- document counter: nothing here changes `documents`.

CREATE TABLE implementation_graphs (
    document_id         UUID NOT NULL REFERENCES documents (id),
    graph_version       BIGINT NOT NULL,
    plan_revision       BIGINT NOT NULL,
    graph_revision      BIGINT NOT NULL,
    state               TEXT NOT NULL,
    definition          TEXT NOT NULL,
    verified            BOOLEAN NOT NULL,
    revision_requested  BOOLEAN NOT NULL,
    run_id              TEXT,
    created_at_ms       BIGINT NOT NULL,
    updated_at_ms       BIGINT NOT NULL,
    PRIMARY KEY (document_id, graph_version)
);
