-- Paired machines (`store::MachineStore`): a member's machine that runs Planners for documents
-- (hosted-agent.md, "Remote Planner"; docs/connector.md). Additive: five new tables.
-- Owns: one row per paired machine with its owner's account and the machine's own GitHub
-- authorization sealed at rest (`sealed`, opaque to the database; `credential_revision` grows
-- with every write, so a write against an older revision is refused); the teammates a machine
-- is shared with; each account's favourite machine; the machine chosen for a document (one per
-- document, with the account that chose it); and the document-scoped Planner credentials issued
-- to a machine, stored only as the SHA-256 of the credential (AC-24). Unpairing a machine
-- deletes its rows in every table.

CREATE TABLE machines (
    id                   TEXT PRIMARY KEY NOT NULL,
    owner_account_id     TEXT NOT NULL REFERENCES accounts (id),
    name                 TEXT NOT NULL,
    release              TEXT,
    credential_revision  INTEGER NOT NULL CHECK (credential_revision >= 1),
    sealed               BLOB NOT NULL,
    created_at_ms        INTEGER NOT NULL
);
CREATE INDEX machines_by_owner ON machines (owner_account_id, created_at_ms);

CREATE TABLE machine_shares (
    machine_id   TEXT NOT NULL REFERENCES machines (id),
    account_id   TEXT NOT NULL REFERENCES accounts (id),
    shared_at_ms INTEGER NOT NULL,
    PRIMARY KEY (machine_id, account_id)
);
CREATE INDEX machine_shares_by_account ON machine_shares (account_id);

CREATE TABLE machine_favourites (
    account_id  TEXT PRIMARY KEY NOT NULL REFERENCES accounts (id),
    machine_id  TEXT NOT NULL REFERENCES machines (id)
);

CREATE TABLE document_machines (
    document_id           TEXT PRIMARY KEY NOT NULL REFERENCES documents (id),
    machine_id            TEXT NOT NULL REFERENCES machines (id),
    chosen_by_account_id  TEXT NOT NULL,
    chosen_by             TEXT NOT NULL,
    chosen_at_ms          INTEGER NOT NULL
);
CREATE INDEX document_machines_by_machine ON document_machines (machine_id);

CREATE TABLE planner_credentials (
    digest         TEXT PRIMARY KEY NOT NULL,
    machine_id     TEXT NOT NULL REFERENCES machines (id),
    document_id    TEXT NOT NULL REFERENCES documents (id),
    issued_at_ms   INTEGER NOT NULL,
    expires_at_ms  INTEGER NOT NULL
);
CREATE INDEX planner_credentials_by_pair ON planner_credentials (machine_id, document_id, issued_at_ms);
