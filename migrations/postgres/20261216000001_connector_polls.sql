-- The latest poll of each paired machine's connector, for several server processes on one
-- database: whichever process a poll reaches records it here, and every process reads the recent
-- ones back, so each knows which machines are online and which allow automatic builds.
CREATE TABLE connector_polls (
    machine_id    UUID PRIMARY KEY NOT NULL REFERENCES machines (id),
    polled_at_ms  BIGINT NOT NULL,
    auto_build    BOOLEAN NOT NULL
);
CREATE INDEX connector_polls_by_time ON connector_polls (polled_at_ms);
