-- Identifiers compare as bytes (issue 13): on PostgreSQL this migration gives every key
-- column the "C" collation. SQLite compares text with BINARY (memcmp) unless told
-- otherwise, so its schema already does; this file keeps the two dialects' versions in step.
SELECT 1;
