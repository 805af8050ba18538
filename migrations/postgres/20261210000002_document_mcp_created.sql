-- Whether a document was created through MCP (`create_document`): the creation metadata that
-- `read_implementation` requires before it shows a graph and the repository context (LIFE-76,
-- GRA-03). Additive: one column on `documents`, FALSE for rows written before it, except where
-- a brief or a provenance (which only MCP creation sets) says the row came from MCP.
-- Owns:
-- * `documents.mcp_created`: set at creation, never changed. Read alone
--   (`Store::created_through_mcp`), never with the rest of the row.

ALTER TABLE documents ADD COLUMN mcp_created BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE documents SET mcp_created = TRUE WHERE brief IS NOT NULL OR base_branch IS NOT NULL;
