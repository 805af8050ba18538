-- Browser-login credentials encrypted at rest (RFC-60 / RFC-69 / EAR-03), for the PostgreSQL
-- backend (`server/src/store/postgres.rs`).
-- Owns: one row per browser login that was ever given a credential. `sealed` holds the bytes made
-- by `crypto::CredentialKey::seal` (format version, nonce, AES-256-GCM ciphertext and tag) and is
-- opaque to the database; it is NULL after the credential was deleted (sign-out), while the row
-- stays so `revision` keeps growing and a write against an older revision is refused.
-- A login without a row is at revision 0. Deleting a login deletes its row.

CREATE TABLE browser_login_credentials (
    login_id  UUID PRIMARY KEY REFERENCES browser_logins (id) ON DELETE CASCADE,
    revision  BIGINT NOT NULL CHECK (revision >= 1),
    sealed    BYTEA
);

-- Startup cleanup deletes logins past their expiry.
CREATE INDEX browser_logins_expires ON browser_logins (expires_at_ms);
