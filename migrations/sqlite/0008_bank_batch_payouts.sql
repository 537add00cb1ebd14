-- Bank generation at scale (issue 14): which batch holds a payout, so a generation reads
-- the created payouts in no batch yet page by page instead of loading every batch and every
-- created payout; a projection like the others (`verify` compares it with a fresh fold,
-- `rebuild` replaces it). A payout is in one batch at most.
CREATE TABLE bank_batch_payouts (payout_id TEXT PRIMARY KEY, batch_id TEXT NOT NULL);

-- The batches generated before this table existed.
INSERT INTO bank_batch_payouts (payout_id, batch_id)
SELECT j.value, b.batch_id FROM bank_batches AS b, json_each(b.payout_ids) AS j;

-- The created payouts of a rail in id order (bytes), read from a cursor.
DROP INDEX payouts_by_status;
CREATE INDEX payouts_by_status_and_id ON payouts (status, rail, payout_id);
