-- Comment threads (`store::CommentStore`): a quoted passage of a document, the note that opened
-- the thread and its replies, people's and the Planner's (hosted-agent.md, comments to the
-- Planner; RULINGS ISO-20). Additive: two new tables.
-- Owns: one row per thread (its reply count, resolution and the revision a Planner comment turn
-- wrote as its result), and one row per note numbered from 0 within its thread.

CREATE TABLE comment_threads (
    id               UUID PRIMARY KEY NOT NULL,
    document_id      UUID NOT NULL REFERENCES documents (id),
    quote            TEXT NOT NULL,
    created_by       TEXT NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    resolved_by      TEXT,
    resolved_at_ms   BIGINT,
    replies          BIGINT NOT NULL DEFAULT 0,
    result_revision  BIGINT
);

CREATE INDEX comment_threads_by_document ON comment_threads (document_id, created_at_ms);

CREATE TABLE comment_notes (
    thread_id        UUID NOT NULL REFERENCES comment_threads (id),
    seq              BIGINT NOT NULL,
    author_login     TEXT,
    to_planner       BOOLEAN NOT NULL,
    body             TEXT NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    PRIMARY KEY (thread_id, seq)
);
