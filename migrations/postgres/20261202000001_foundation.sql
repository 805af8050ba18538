-- Foundation schema for the PostgreSQL backend (`server/src/store/postgres.rs`).
-- Owns: accounts, browser logins, documents, the Chat transcript, Planner ownership and the
-- writer lease. UUIDs are native UUID; times are Unix milliseconds (BIGINT).
-- Repository owner and name are compared case-insensitively (as GitHub does) through the
-- `*_key` columns, which hold their ASCII-lowercased forms; the display spelling is kept as given.

CREATE TABLE accounts (
    id              UUID PRIMARY KEY,
    github_user_id  BIGINT NOT NULL UNIQUE,
    login           TEXT NOT NULL,
    login_key       TEXT NOT NULL,
    created_at_ms   BIGINT NOT NULL
);
CREATE INDEX accounts_login_key ON accounts (login_key);

CREATE TABLE browser_logins (
    id                UUID PRIMARY KEY,
    account_id        UUID NOT NULL REFERENCES accounts (id),
    verifier_hash     TEXT NOT NULL,
    created_at_ms     BIGINT NOT NULL,
    expires_at_ms     BIGINT NOT NULL,
    signed_out_at_ms  BIGINT
);
CREATE INDEX browser_logins_account ON browser_logins (account_id);

CREATE TABLE documents (
    id                UUID PRIMARY KEY,
    repo_owner        TEXT NOT NULL,
    repo_name         TEXT NOT NULL,
    repo_owner_key    TEXT NOT NULL,
    repo_name_key     TEXT NOT NULL,
    slug              TEXT NOT NULL,
    title             TEXT NOT NULL,
    plan_revision     BIGINT NOT NULL DEFAULT 0 CHECK (plan_revision >= 0),
    storage_revision  BIGINT NOT NULL DEFAULT 0 CHECK (storage_revision >= 0),
    archived          BOOLEAN NOT NULL DEFAULT FALSE,
    created_at_ms     BIGINT NOT NULL,
    CONSTRAINT documents_repo_slug UNIQUE (repo_owner_key, repo_name_key, slug)
);

CREATE TABLE chat_transcript (
    document_id    UUID NOT NULL REFERENCES documents (id),
    seq            BIGINT NOT NULL CHECK (seq >= 1),
    author_login   TEXT,
    kind           TEXT NOT NULL,
    body           TEXT NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (document_id, seq)
);

-- One row per document, created with it at generation 0. The holder columns are all set or all
-- NULL. They are a snapshot of who claimed (no foreign key): policy checks the account.
CREATE TABLE planner_ownership (
    document_id              UUID PRIMARY KEY REFERENCES documents (id),
    generation               BIGINT NOT NULL DEFAULT 0 CHECK (generation >= 0),
    holder_account_id        UUID,
    holder_login             TEXT,
    holder_browser_login_id  UUID,
    claimed_at_ms            BIGINT,
    CHECK ((holder_account_id IS NULL AND holder_login IS NULL
            AND holder_browser_login_id IS NULL AND claimed_at_ms IS NULL)
        OR (holder_account_id IS NOT NULL AND holder_login IS NOT NULL
            AND holder_browser_login_id IS NOT NULL AND claimed_at_ms IS NOT NULL))
);

-- The database-wide writer lease: exactly one row, seeded free. A release clears the holder and
-- keeps the epoch, so epochs grow for the life of the database.
CREATE TABLE writer_lease (
    name           TEXT PRIMARY KEY,
    holder         TEXT,
    epoch          BIGINT NOT NULL CHECK (epoch >= 0),
    expires_at_ms  BIGINT NOT NULL
);
INSERT INTO writer_lease (name, holder, epoch, expires_at_ms) VALUES ('chopin:writer', NULL, 0, 0);
