-- Reliability telemetry (SPEC §12): GPU availability schedules, announced maintenance,
-- online intervals, job outcomes and benchmark results, as the platform's agent,
-- orchestrator and benchmark runner report them. Not money: kept beside the hash chain in
-- one append-only table, idempotent by (kind, report_id) like usage by its event_id (the
-- same report again is a duplicate, other content under the same id a conflict). The
-- listing changes they cause are ledger events (`gpu.listing_changed`).
CREATE TABLE IF NOT EXISTS gpu_reports (
    kind TEXT COLLATE "C" NOT NULL,
    report_id TEXT COLLATE "C" NOT NULL,
    gpu_id TEXT COLLATE "C" NOT NULL,
    provider_id TEXT COLLATE "C" NOT NULL,
    at_ms BIGINT NOT NULL,
    end_ms BIGINT,
    body TEXT NOT NULL,
    recorded_at_ms BIGINT NOT NULL,
    PRIMARY KEY (kind, report_id)
);
CREATE INDEX IF NOT EXISTS gpu_reports_by_gpu ON gpu_reports (gpu_id, kind, at_ms);
-- Identifiers compare as bytes (0009); running this file again only sets that collation.
ALTER TABLE gpu_reports ALTER COLUMN kind TYPE TEXT COLLATE "C", ALTER COLUMN report_id TYPE TEXT COLLATE "C", ALTER COLUMN gpu_id TYPE TEXT COLLATE "C", ALTER COLUMN provider_id TYPE TEXT COLLATE "C";
DROP TRIGGER IF EXISTS gpu_reports_refuse_update_delete ON gpu_reports;
DROP TRIGGER IF EXISTS gpu_reports_refuse_truncate ON gpu_reports;
CREATE TRIGGER gpu_reports_refuse_update_delete BEFORE UPDATE OR DELETE ON gpu_reports FOR EACH ROW EXECUTE FUNCTION settle_refuse_mutation();
CREATE TRIGGER gpu_reports_refuse_truncate BEFORE TRUNCATE ON gpu_reports FOR EACH STATEMENT EXECUTE FUNCTION settle_refuse_mutation();
