-- Chat files (`store::AttachmentStore`, hosted-agent.md "Files in Chat"): images and text files a
-- person uploads to a document's Chat, kept in the document's storage (FILE-01).
-- Additive: one new table.
-- Owns: one row per file, with its bytes. A row with no `sent_seq` is its uploader's alone and is
-- forgotten a day after `created_at_ms` (FILE-09, FILE-11); `sent_seq` names the transcript
-- entry that sent it, after which everyone who reads the document may fetch it.

CREATE TABLE chat_attachments (
    id             UUID PRIMARY KEY NOT NULL,
    document_id    UUID NOT NULL REFERENCES documents (id),
    uploader       TEXT NOT NULL,
    name           TEXT NOT NULL,
    kind           TEXT NOT NULL,
    mime_type      TEXT NOT NULL,
    size           BIGINT NOT NULL,
    bytes          BYTEA NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    sent_seq       BIGINT
);

CREATE INDEX chat_attachments_unsent ON chat_attachments (document_id, uploader)
    WHERE sent_seq IS NULL;
