-- The overlap check of usage ingestion on PostgreSQL, before and after issue 13's first
-- step, without engine code: 1,000,000 booked 10-minute segments (8,000 GPUs × 125, as
-- at the end of `cargo bench --bench ingest -- --events 1000000`), then 900 new events
-- probing the ends of 900 GPUs' histories, sent as one JSON parameter as the engine does.
--   psql -h 127.0.0.1 -U postgres -d test -f ops/bench/overlap.sql | grep -E '^Time'
-- The first three times: the old range scan (every segment of the GPU that started in
-- the 24 hours before the event); the last three: one backward index step per event.
DROP TABLE IF EXISTS overlap_segments;
CREATE TABLE overlap_segments (gpu_id TEXT NOT NULL, started_at_ms BIGINT NOT NULL, ended_at_ms BIGINT NOT NULL, event_id TEXT NOT NULL, PRIMARY KEY (gpu_id, started_at_ms));
INSERT INTO overlap_segments
SELECT 'gpu-' || (g % 8000), 1795000000000 + (g / 8000) * 600000, 1795000000000 + (g / 8000) * 600000 + 600000, 'e-' || g
FROM generate_series(0, 999999) AS g;
VACUUM ANALYZE overlap_segments;
\set probes '(SELECT json_agg(json_build_array(i, ''gpu-'' || (i * 7 % 8000), 1795000000000 + 125 * 600000 - 86400000, 1795000000000 + 125 * 600000 + 600000, 1795000000000 + 125 * 600000)) FROM generate_series(0, 899) AS i)'
\set probes_new '(SELECT json_agg(json_build_array(i, ''gpu-'' || (i * 7 % 8000), 1795000000000 + 125 * 600000 + 600000, 1795000000000 + 125 * 600000)) FROM generate_series(0, 899) AS i)'
\timing on
SELECT count(*) FROM json_array_elements(:probes) AS j JOIN overlap_segments AS s ON s.gpu_id = j.value ->> 1 AND s.started_at_ms > CAST(j.value ->> 2 AS BIGINT) AND s.started_at_ms < CAST(j.value ->> 3 AS BIGINT) AND s.ended_at_ms > CAST(j.value ->> 4 AS BIGINT);
SELECT count(*) FROM json_array_elements(:probes) AS j JOIN overlap_segments AS s ON s.gpu_id = j.value ->> 1 AND s.started_at_ms > CAST(j.value ->> 2 AS BIGINT) AND s.started_at_ms < CAST(j.value ->> 3 AS BIGINT) AND s.ended_at_ms > CAST(j.value ->> 4 AS BIGINT);
SELECT count(*) FROM json_array_elements(:probes) AS j JOIN overlap_segments AS s ON s.gpu_id = j.value ->> 1 AND s.started_at_ms > CAST(j.value ->> 2 AS BIGINT) AND s.started_at_ms < CAST(j.value ->> 3 AS BIGINT) AND s.ended_at_ms > CAST(j.value ->> 4 AS BIGINT);
SELECT count(*) FROM json_array_elements(:probes_new) AS j JOIN overlap_segments AS s ON s.gpu_id = j.value ->> 1 AND s.started_at_ms = (SELECT p.started_at_ms FROM overlap_segments AS p WHERE p.gpu_id = j.value ->> 1 AND p.started_at_ms < CAST(j.value ->> 2 AS BIGINT) ORDER BY p.started_at_ms DESC LIMIT 1) WHERE s.ended_at_ms > CAST(j.value ->> 3 AS BIGINT);
SELECT count(*) FROM json_array_elements(:probes_new) AS j JOIN overlap_segments AS s ON s.gpu_id = j.value ->> 1 AND s.started_at_ms = (SELECT p.started_at_ms FROM overlap_segments AS p WHERE p.gpu_id = j.value ->> 1 AND p.started_at_ms < CAST(j.value ->> 2 AS BIGINT) ORDER BY p.started_at_ms DESC LIMIT 1) WHERE s.ended_at_ms > CAST(j.value ->> 3 AS BIGINT);
SELECT count(*) FROM json_array_elements(:probes_new) AS j JOIN overlap_segments AS s ON s.gpu_id = j.value ->> 1 AND s.started_at_ms = (SELECT p.started_at_ms FROM overlap_segments AS p WHERE p.gpu_id = j.value ->> 1 AND p.started_at_ms < CAST(j.value ->> 2 AS BIGINT) ORDER BY p.started_at_ms DESC LIMIT 1) WHERE s.ended_at_ms > CAST(j.value ->> 3 AS BIGINT);
DROP TABLE overlap_segments;
