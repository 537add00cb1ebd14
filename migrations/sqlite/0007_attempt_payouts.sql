-- Which Solana attempts name a payout (issue 14): a signed attempt's checks read the
-- attempts that hold each of its payouts through this table instead of scanning every
-- attempt ever signed. A projection like the others: `verify` compares it with a fresh
-- fold, `rebuild` replaces it.
CREATE TABLE solana_attempt_payouts (payout_id TEXT NOT NULL, attempt_id TEXT NOT NULL, signed_at_ms BIGINT NOT NULL, PRIMARY KEY (payout_id, attempt_id));

-- The attempts signed before this table existed.
INSERT INTO solana_attempt_payouts (payout_id, attempt_id, signed_at_ms)
SELECT j.value, a.attempt_id, a.signed_at_ms FROM solana_attempts AS a, json_each(a.payout_ids) AS j;
