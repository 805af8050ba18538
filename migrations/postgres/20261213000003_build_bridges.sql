-- A build's scoped bridge (LIFE-06): picking a build up hands its connector a bridge token for
-- `/mcp` that reaches only that build's document and run; the server keeps its SHA-256 only.
-- Additive: one nullable column and its index.

ALTER TABLE implementation_builds ADD COLUMN bridge_digest TEXT;
CREATE UNIQUE INDEX implementation_builds_by_bridge ON implementation_builds (bridge_digest);
