-- Chat appends made once (issue 24): a transcript entry may carry the key of the append that
-- made it. Additive: one nullable column on `chat_transcript` and a unique index on it per
-- document; rows written before this migration keep NULL (no key).
-- Owns:
-- * `chat_transcript.append_key`: what makes an append one. An append whose key the document
--   already holds appends nothing and answers the entry that key made, so a batch run again
--   after a commit whose outcome was unknown cannot add a line twice. The server gives every
--   append a fresh random key.

ALTER TABLE chat_transcript ADD COLUMN append_key TEXT;
CREATE UNIQUE INDEX chat_transcript_append_key
    ON chat_transcript (document_id, append_key) WHERE append_key IS NOT NULL;
