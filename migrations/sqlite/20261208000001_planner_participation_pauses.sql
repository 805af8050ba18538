-- Automatic participation paused (`store::ModelChoiceStore::pause_participation`): the shared,
-- durable pause of a document's automatic participation (hosted-agent.md, "Chat context";
-- RULINGS CTX-03). Additive: one new table.
-- Owns: one row per document while it is paused; no row means Chopin takes part on its own.

CREATE TABLE planner_participation_pauses (
    document_id     TEXT PRIMARY KEY NOT NULL REFERENCES documents (id),
    paused_by       TEXT NOT NULL,
    paused_at_ms    BIGINT NOT NULL
);
