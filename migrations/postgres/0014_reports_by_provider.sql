-- The live stream of a provider's dashboard follows its GPUs' reliability reports
-- (`store::reliability::provider_reports_mark`: the latest `recorded_at_ms` and the
-- reports recorded then), a look-up at the end of this index instead of a scan of the
-- table.
CREATE INDEX IF NOT EXISTS gpu_reports_by_provider ON gpu_reports (provider_id, recorded_at_ms);
