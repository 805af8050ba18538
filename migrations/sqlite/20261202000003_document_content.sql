-- Durable document content and slug aliases, for the SQLite backend (`server/src/store/sqlite.rs`).
-- Additive: new columns with defaults on `documents`, and three new tables.
-- Owns:
-- * `documents.yjs_epoch`: changes only when a document's content is replaced wholesale, so updates
--   of one Yjs history are never applied to another; `documents.last_update_seq`: the last journal
--   seq handed out (0 for none). Kept on the document, not derived from the journal, because
--   checkpoints prune the journal while seqs keep growing.
-- * `document_updates`: the journal of accepted Yjs v1 updates after the checkpoint, by seq.
-- * `document_checkpoints`: at most one complete Yjs v1 state per document, covering every update
--   up to `upto_seq`, and the epoch it was written in.
-- * `document_slug_aliases`: the former slugs of a document, in the order they were left
--   (`position`). A slug is unique per repository across `documents.slug` and this table together;
--   the store checks the other table while holding SQLite's write lock (`BEGIN IMMEDIATE`), and
--   each table's own unique constraint backs it up.

ALTER TABLE documents ADD COLUMN yjs_epoch INTEGER NOT NULL DEFAULT 0 CHECK (yjs_epoch >= 0);
ALTER TABLE documents ADD COLUMN last_update_seq INTEGER NOT NULL DEFAULT 0
    CHECK (last_update_seq >= 0);

CREATE TABLE document_updates (
    document_id    TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    seq            INTEGER NOT NULL CHECK (seq >= 1),
    update_v1      BLOB NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (document_id, seq)
);

CREATE TABLE document_checkpoints (
    document_id  TEXT PRIMARY KEY NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    upto_seq     INTEGER NOT NULL CHECK (upto_seq >= 0),
    yjs_epoch    INTEGER NOT NULL CHECK (yjs_epoch >= 0),
    state_v1     BLOB NOT NULL
);

CREATE TABLE document_slug_aliases (
    document_id     TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    repo_owner_key  TEXT NOT NULL,
    repo_name_key   TEXT NOT NULL,
    slug            TEXT NOT NULL,
    position        INTEGER NOT NULL CHECK (position >= 1),
    CONSTRAINT document_slug_aliases_repo_slug UNIQUE (repo_owner_key, repo_name_key, slug),
    CONSTRAINT document_slug_aliases_order UNIQUE (document_id, position)
);
