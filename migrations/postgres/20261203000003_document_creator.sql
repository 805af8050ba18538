-- A document's creator and creation brief, for the PostgreSQL backend (`store/src/postgres.rs`).
-- Additive: three nullable columns on `documents`; rows written before this migration keep NULL
-- (nobody known, no brief).
-- Owns:
-- * `documents.creator_account_id`, `documents.creator_login`: the account that created the
--   document and its GitHub login then, both set or both NULL (`documents_creator`). A snapshot
--   (no foreign key), like a Planner holder's: policy (who may send an automatic follow-up)
--   compares the account id; the login is for the words of a refusal. Set at creation, never
--   changed.
-- * `documents.brief`: the creation brief as given (MCP `create_document`), NULL without one.
--   Read alone (`Store::document_brief`), never with the rest of the row. Its bound is the
--   server's, not the database's.

ALTER TABLE documents
    ADD COLUMN creator_account_id UUID,
    ADD COLUMN creator_login TEXT,
    ADD COLUMN brief TEXT,
    ADD CONSTRAINT documents_creator
        CHECK ((creator_account_id IS NULL) = (creator_login IS NULL));
