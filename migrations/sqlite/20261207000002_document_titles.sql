-- Title maintenance's record of a document's title (`store::TitleStore`, hosted-agent.md OWN-12..14).
-- Additive: one new table.
-- Owns: one row per document whose title a person chose (`chosen`: renamed; no later draft
-- replaces it) or a Planner's title job drafted (`planner_title`: the title it last drafted, which
-- a later draft may refine). A document with no row has neither.

CREATE TABLE document_titles (
    document_id    TEXT PRIMARY KEY NOT NULL REFERENCES documents (id),
    chosen         BOOLEAN NOT NULL DEFAULT FALSE,
    planner_title  TEXT
);
