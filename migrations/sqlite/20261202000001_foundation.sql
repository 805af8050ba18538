-- Foundation schema for the embedded SQLite backend (`server/src/store/sqlite.rs`).
-- Owns: accounts, browser logins, documents, the Chat transcript, Planner ownership and the
-- writer lease. UUIDs are stored as hyphenated lowercase TEXT; times are Unix milliseconds.
-- Repository owner and name are compared case-insensitively (as GitHub does) through the
-- `*_key` columns, which hold their ASCII-lowercased forms; the display spelling is kept as given.

CREATE TABLE accounts (
    id              TEXT PRIMARY KEY NOT NULL,
    github_user_id  INTEGER NOT NULL UNIQUE,
    login           TEXT NOT NULL,
    login_key       TEXT NOT NULL,
    created_at_ms   INTEGER NOT NULL
);
CREATE INDEX accounts_login_key ON accounts (login_key);

CREATE TABLE browser_logins (
    id                TEXT PRIMARY KEY NOT NULL,
    account_id        TEXT NOT NULL REFERENCES accounts (id),
    verifier_hash     TEXT NOT NULL,
    created_at_ms     INTEGER NOT NULL,
    expires_at_ms     INTEGER NOT NULL,
    signed_out_at_ms  INTEGER
);
CREATE INDEX browser_logins_account ON browser_logins (account_id);

CREATE TABLE documents (
    id                TEXT PRIMARY KEY NOT NULL,
    repo_owner        TEXT NOT NULL,
    repo_name         TEXT NOT NULL,
    repo_owner_key    TEXT NOT NULL,
    repo_name_key     TEXT NOT NULL,
    slug              TEXT NOT NULL,
    title             TEXT NOT NULL,
    plan_revision     INTEGER NOT NULL DEFAULT 0 CHECK (plan_revision >= 0),
    storage_revision  INTEGER NOT NULL DEFAULT 0 CHECK (storage_revision >= 0),
    archived          INTEGER NOT NULL DEFAULT 0 CHECK (archived IN (0, 1)),
    created_at_ms     INTEGER NOT NULL,
    CONSTRAINT documents_repo_slug UNIQUE (repo_owner_key, repo_name_key, slug)
);

CREATE TABLE chat_transcript (
    document_id    TEXT NOT NULL REFERENCES documents (id),
    seq            INTEGER NOT NULL CHECK (seq >= 1),
    author_login   TEXT,
    kind           TEXT NOT NULL,
    body           TEXT NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (document_id, seq)
);

-- One row per document, created with it at generation 0. The holder columns are all set or all
-- NULL. They are a snapshot of who claimed (no foreign key): policy checks the account.
CREATE TABLE planner_ownership (
    document_id              TEXT PRIMARY KEY NOT NULL REFERENCES documents (id),
    generation               INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0),
    holder_account_id        TEXT,
    holder_login             TEXT,
    holder_browser_login_id  TEXT,
    claimed_at_ms            INTEGER,
    CHECK ((holder_account_id IS NULL AND holder_login IS NULL
            AND holder_browser_login_id IS NULL AND claimed_at_ms IS NULL)
        OR (holder_account_id IS NOT NULL AND holder_login IS NOT NULL
            AND holder_browser_login_id IS NOT NULL AND claimed_at_ms IS NOT NULL))
);

-- The database-wide writer lease: exactly one row, seeded free. A release clears the holder and
-- keeps the epoch, so epochs grow for the life of the database.
CREATE TABLE writer_lease (
    name           TEXT PRIMARY KEY NOT NULL,
    holder         TEXT,
    epoch          INTEGER NOT NULL CHECK (epoch >= 0),
    expires_at_ms  INTEGER NOT NULL
);
INSERT INTO writer_lease (name, holder, epoch, expires_at_ms) VALUES ('chopin:writer', NULL, 0, 0);
