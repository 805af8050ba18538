-- Each document's lease, for several server processes on one database: the process holding a
-- document's lease serves it, and every write it makes for the document checks, in the same
-- transaction, that the row still names its epoch and a holder. A row is made by the
-- document's first acquisition; a release clears the holder and keeps the epoch, so a
-- document's epochs grow for the life of the database. No reference to documents: a lease may
-- be taken for a document before it is created.
CREATE TABLE document_leases (
    document_id    TEXT PRIMARY KEY NOT NULL,
    holder         TEXT,
    epoch          BIGINT NOT NULL CHECK (epoch >= 1),
    expires_at_ms  BIGINT NOT NULL
);
