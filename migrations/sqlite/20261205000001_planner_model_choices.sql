-- Planner model choices (`store::ModelChoiceStore`): the model and reasoning level a writer chose
-- for a document's Planner (hosted-agent.md, "Choosing the model and reasoning level").
-- Additive: one new table.
-- Owns: one row per root document; no row means nobody chose and the harness runs its default.
-- `model` and `thinking_level` are stored exactly as the catalog wrote them when chosen; a row is
-- kept when its model later leaves the catalog, so the choice returns when the model does.

CREATE TABLE planner_model_choices (
    document_id     TEXT PRIMARY KEY NOT NULL REFERENCES documents (id),
    model           TEXT NOT NULL,
    thinking_level  TEXT,
    chosen_by       TEXT NOT NULL,
    chosen_at_ms    BIGINT NOT NULL
);
