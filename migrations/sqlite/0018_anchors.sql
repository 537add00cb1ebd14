-- Anchors of the chain heads (SPEC §13). Each root appended to the anchor log is also
-- recorded here, so that a log cut short is seen (the ledger knows roots the log lost),
-- and each root published on Solana is recorded with its transaction. Append-only.
CREATE TABLE anchors (
    n INTEGER PRIMARY KEY,
    root TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);
CREATE TABLE anchor_publications (
    signature TEXT PRIMARY KEY,
    n INTEGER NOT NULL,
    root TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);
CREATE TRIGGER anchors_refuse_update BEFORE UPDATE ON anchors BEGIN SELECT RAISE(ABORT, 'append-only table anchors: UPDATE refused'); END;
CREATE TRIGGER anchors_refuse_delete BEFORE DELETE ON anchors BEGIN SELECT RAISE(ABORT, 'append-only table anchors: DELETE refused'); END;
CREATE TRIGGER anchor_publications_refuse_update BEFORE UPDATE ON anchor_publications BEGIN SELECT RAISE(ABORT, 'append-only table anchor_publications: UPDATE refused'); END;
CREATE TRIGGER anchor_publications_refuse_delete BEFORE DELETE ON anchor_publications BEGIN SELECT RAISE(ABORT, 'append-only table anchor_publications: DELETE refused'); END;
