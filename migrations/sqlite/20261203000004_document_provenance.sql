-- A document's creation provenance, for the SQLite backend (`store/src/sqlite.rs`).
-- Additive: two nullable columns on `documents`; rows written before this migration keep NULL
-- (no provenance).
-- Owns:
-- * `documents.base_branch`, `documents.base_commit`: the branch and commit of the checkout
--   the creating agent worked in (MCP `create_document`'s `baseBranch`, `baseCommit`), both set
--   or both NULL. Kept as given: the server checks their shape (a git branch name; a full
--   40- or 64-digit lowercase hex object id) and never resolves them against GitHub. Set at
--   creation, never changed. Read alone (`Store::document_provenance`), never with the rest of
--   the row.

ALTER TABLE documents ADD COLUMN base_branch TEXT;
ALTER TABLE documents ADD COLUMN base_commit TEXT
    CHECK ((base_branch IS NULL) = (base_commit IS NULL));
