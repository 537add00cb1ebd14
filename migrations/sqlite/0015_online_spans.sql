-- A GPU's online time as the score reads it (SPEC §12): the union of its online intervals,
-- kept merged as they are recorded (`store::reliability::record_many`), so a score reads a
-- span per stretch a GPU stayed up instead of one row per report (an agent reporting every
-- five minutes sends 288 a day). Derived from `gpu_reports` and written in the same
-- transaction; filled here from the intervals recorded before.
CREATE TABLE gpu_online_spans (
    gpu_id TEXT NOT NULL,
    start_ms BIGINT NOT NULL,
    end_ms BIGINT NOT NULL,
    PRIMARY KEY (gpu_id, start_ms)
);
INSERT INTO gpu_online_spans (gpu_id, start_ms, end_ms)
SELECT gpu_id, MIN(at_ms), MAX(end_ms) FROM (
    SELECT gpu_id, at_ms, end_ms,
           SUM(starts) OVER (PARTITION BY gpu_id ORDER BY at_ms, end_ms ROWS UNBOUNDED PRECEDING) AS span
    FROM (
        SELECT gpu_id, at_ms, end_ms,
               CASE WHEN at_ms <= MAX(end_ms) OVER (PARTITION BY gpu_id ORDER BY at_ms, end_ms
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) THEN 0 ELSE 1 END AS starts
        FROM gpu_reports WHERE kind = 'online'
    ) AS i
) AS s GROUP BY gpu_id, span;
