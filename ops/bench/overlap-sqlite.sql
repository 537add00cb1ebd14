-- The overlap check of usage ingestion on SQLite, before and after issue 13's first step
-- (see overlap.sql for the PostgreSQL twin): 1,000,000 booked segments, 900 probes as one
-- JSON parameter.   sqlite3 /tmp/overlap.db < ops/bench/overlap-sqlite.sql
-- The first three `Run Time` lines: the old range scan; the last three: the backward step.
PRAGMA journal_mode = WAL;
DROP TABLE IF EXISTS overlap_segments;
CREATE TABLE overlap_segments (gpu_id TEXT NOT NULL, started_at_ms BIGINT NOT NULL, ended_at_ms BIGINT NOT NULL, event_id TEXT NOT NULL, PRIMARY KEY (gpu_id, started_at_ms));
WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n < 999999)
INSERT INTO overlap_segments SELECT 'gpu-' || (n % 8000), 1795000000000 + (n / 8000) * 600000, 1795000000000 + (n / 8000) * 600000 + 600000, 'e-' || n FROM g;
ANALYZE;
CREATE TEMP TABLE probes AS
WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i < 899)
SELECT json_group_array(json_array(i, 'gpu-' || (i * 7 % 8000), 1795000000000 + 125 * 600000 - 86400000, 1795000000000 + 125 * 600000 + 600000, 1795000000000 + 125 * 600000)) AS old,
       json_group_array(json_array(i, 'gpu-' || (i * 7 % 8000), 1795000000000 + 125 * 600000 + 600000, 1795000000000 + 125 * 600000)) AS new
FROM g;
.timer on
SELECT count(*) FROM probes, json_each(probes.old) AS j JOIN overlap_segments AS s ON s.gpu_id = j.value ->> 1 AND s.started_at_ms > CAST(j.value ->> 2 AS BIGINT) AND s.started_at_ms < CAST(j.value ->> 3 AS BIGINT) AND s.ended_at_ms > CAST(j.value ->> 4 AS BIGINT);
SELECT count(*) FROM probes, json_each(probes.old) AS j JOIN overlap_segments AS s ON s.gpu_id = j.value ->> 1 AND s.started_at_ms > CAST(j.value ->> 2 AS BIGINT) AND s.started_at_ms < CAST(j.value ->> 3 AS BIGINT) AND s.ended_at_ms > CAST(j.value ->> 4 AS BIGINT);
SELECT count(*) FROM probes, json_each(probes.old) AS j JOIN overlap_segments AS s ON s.gpu_id = j.value ->> 1 AND s.started_at_ms > CAST(j.value ->> 2 AS BIGINT) AND s.started_at_ms < CAST(j.value ->> 3 AS BIGINT) AND s.ended_at_ms > CAST(j.value ->> 4 AS BIGINT);
SELECT count(*) FROM probes, json_each(probes.new) AS j JOIN overlap_segments AS s ON s.gpu_id = j.value ->> 1 AND s.started_at_ms = (SELECT p.started_at_ms FROM overlap_segments AS p WHERE p.gpu_id = j.value ->> 1 AND p.started_at_ms < CAST(j.value ->> 2 AS BIGINT) ORDER BY p.started_at_ms DESC LIMIT 1) WHERE s.ended_at_ms > CAST(j.value ->> 3 AS BIGINT);
SELECT count(*) FROM probes, json_each(probes.new) AS j JOIN overlap_segments AS s ON s.gpu_id = j.value ->> 1 AND s.started_at_ms = (SELECT p.started_at_ms FROM overlap_segments AS p WHERE p.gpu_id = j.value ->> 1 AND p.started_at_ms < CAST(j.value ->> 2 AS BIGINT) ORDER BY p.started_at_ms DESC LIMIT 1) WHERE s.ended_at_ms > CAST(j.value ->> 3 AS BIGINT);
SELECT count(*) FROM probes, json_each(probes.new) AS j JOIN overlap_segments AS s ON s.gpu_id = j.value ->> 1 AND s.started_at_ms = (SELECT p.started_at_ms FROM overlap_segments AS p WHERE p.gpu_id = j.value ->> 1 AND p.started_at_ms < CAST(j.value ->> 2 AS BIGINT) ORDER BY p.started_at_ms DESC LIMIT 1) WHERE s.ended_at_ms > CAST(j.value ->> 3 AS BIGINT);
