-- Requests kept under their callers' keys for a while, so a retried call answers what the first
-- one answered whichever process the retry reaches (several server processes on one database):
-- a claim of the key with the digest of the input it was made for, and the answer once there is
-- one. Expired rows are swept by the next claim.
CREATE TABLE kept_requests (
    scope          TEXT NOT NULL,
    holder         TEXT NOT NULL,
    request_key    TEXT NOT NULL,
    digest         TEXT NOT NULL,
    answer         TEXT,
    since_ms       BIGINT NOT NULL,
    expires_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (scope, holder, request_key)
);
CREATE INDEX kept_requests_by_expiry ON kept_requests (expires_at_ms);
