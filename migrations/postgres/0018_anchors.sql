-- Anchors of the chain heads (SPEC §13). Each root appended to the anchor log is also
-- recorded here, so that a log cut short is seen (the ledger knows roots the log lost),
-- and each root published on Solana is recorded with its transaction. Append-only.
CREATE TABLE IF NOT EXISTS anchors (
    n BIGINT PRIMARY KEY,
    root TEXT COLLATE "C" NOT NULL,
    at_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS anchor_publications (
    signature TEXT COLLATE "C" PRIMARY KEY,
    n BIGINT NOT NULL,
    root TEXT COLLATE "C" NOT NULL,
    at_ms BIGINT NOT NULL
);
-- Byte order for the key columns, also where the table was made before.
ALTER TABLE anchor_publications ALTER COLUMN signature TYPE TEXT COLLATE "C";
DROP TRIGGER IF EXISTS anchors_refuse_update_delete ON anchors;
CREATE TRIGGER anchors_refuse_update_delete BEFORE UPDATE OR DELETE ON anchors FOR EACH ROW EXECUTE FUNCTION settle_refuse_mutation();
DROP TRIGGER IF EXISTS anchors_refuse_truncate ON anchors;
CREATE TRIGGER anchors_refuse_truncate BEFORE TRUNCATE ON anchors FOR EACH STATEMENT EXECUTE FUNCTION settle_refuse_mutation();
DROP TRIGGER IF EXISTS anchor_publications_refuse_update_delete ON anchor_publications;
CREATE TRIGGER anchor_publications_refuse_update_delete BEFORE UPDATE OR DELETE ON anchor_publications FOR EACH ROW EXECUTE FUNCTION settle_refuse_mutation();
DROP TRIGGER IF EXISTS anchor_publications_refuse_truncate ON anchor_publications;
CREATE TRIGGER anchor_publications_refuse_truncate BEFORE TRUNCATE ON anchor_publications FOR EACH STATEMENT EXECUTE FUNCTION settle_refuse_mutation();
