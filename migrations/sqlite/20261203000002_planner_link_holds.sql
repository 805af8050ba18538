-- Planner link holds (`store::HoldStore`): what a Planner link's client held when a graceful
-- stop cut the link, or when it dropped with work kept, so the next process can rebuild it as a
-- suspended hold and the client can take its sessions back. Additive: one new table.
-- Owns: one row per document. `held` is the server's own encoding of the sessions, questions,
-- owed answers and unheard Stops (opaque to the database). `handover_until_ms` is the end of
-- the hand-over window a cut wrote (the write's time plus the window); the process that rebuilds
-- the hold sets it to NULL before showing the hold, so only that process gives the window.
-- Startup keeps the Planner owner of a document whose hold names the owner's own browser login
-- while that login has a stored credential.

CREATE TABLE planner_link_holds (
    document_id        TEXT PRIMARY KEY NOT NULL REFERENCES documents (id),
    account_id         TEXT NOT NULL,
    login              TEXT NOT NULL,
    browser_login_id   TEXT,
    generation         BIGINT NOT NULL,
    held               TEXT NOT NULL,
    written_at_ms      BIGINT NOT NULL,
    handover_until_ms  BIGINT
);
