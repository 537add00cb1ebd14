-- Ingestion writes fewer index entries per event (issue 3):
-- * the latest booking time is the maximum over stream heads (Store::max_recorded_at_ms),
--   which the primary key answers; no index on recorded_at is needed;
-- * partial days of the earnings API read a provider's segments GPU by GPU through the
--   primary key (gpu_id, started_at_ms), so no second index on usage_segments is needed.
DROP INDEX events_recorded_at;
DROP INDEX usage_segments_by_provider;
