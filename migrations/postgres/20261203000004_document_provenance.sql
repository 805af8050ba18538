-- A document's creation provenance, for the PostgreSQL backend (`store/src/postgres.rs`).
-- Additive: two nullable columns on `documents`; rows written before this migration keep NULL
-- (no provenance).
-- Owns:
-- * `documents.base_branch`, `documents.base_commit`: the branch and commit of the checkout
--   the creating agent worked in (MCP `create_document`'s `baseBranch`, `baseCommit`), both set
--   or both NULL (`documents_provenance`). Kept as given: the server checks their shape (a git
--   branch name; a full 40- or 64-digit lowercase hex object id) and never resolves them
--   against GitHub. Set at creation, never changed. Read alone (`Store::document_provenance`),
--   never with the rest of the row.

ALTER TABLE documents
    ADD COLUMN base_branch TEXT,
    ADD COLUMN base_commit TEXT,
    ADD CONSTRAINT documents_provenance
        CHECK ((base_branch IS NULL) = (base_commit IS NULL));
