-- Child documents, for the SQLite backend (`server/src/store/sqlite.rs`).
-- Additive: one nullable column on `documents` and a partial index.
-- Owns:
-- * `documents.parent_id`: the top-level document of the same repository this one is a child of,
--   NULL for a top-level document. Set at creation, never changed. One level only: the store
--   refuses a parent that has a parent, one in another repository, an archived one or a missing
--   one, under SQLite's write lock (`BEGIN IMMEDIATE`); the foreign key backs up the last rule.
--   Slugs stay unique per repository, children included (`documents_repo_slug`).
-- * `documents_parent`: a parent's children in creation order (created_at_ms, then id), as
--   `Store::children` lists them; only child rows are indexed.

ALTER TABLE documents ADD COLUMN parent_id TEXT REFERENCES documents (id);

CREATE INDEX documents_parent ON documents (parent_id, created_at_ms, id)
    WHERE parent_id IS NOT NULL;
