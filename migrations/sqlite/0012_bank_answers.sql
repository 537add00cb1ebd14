-- The bank's answers (SPEC §10): status reports, notifications, statements and NACHA
-- returns are matched to payouts by end-to-end id (the payouts' `end_to_end_id`, indexed
-- here), and every file booked is kept once, with the entries of it that booked nothing
-- (unmatched, another amount, a batch never sent): projections of `bank_answer.imported`.
-- Written so that running it again changes nothing.
CREATE TABLE IF NOT EXISTS bank_answer_files (kind TEXT NOT NULL, message_id TEXT NOT NULL, sha256 TEXT NOT NULL, entries BIGINT NOT NULL, matched BIGINT NOT NULL, exceptions BIGINT NOT NULL, imported_at_ms BIGINT NOT NULL, PRIMARY KEY (kind, message_id));
CREATE TABLE IF NOT EXISTS bank_answer_exceptions (entry_key TEXT PRIMARY KEY, problem TEXT NOT NULL, reference TEXT NOT NULL, batch_id TEXT, amount_cents BIGINT NOT NULL, currency TEXT NOT NULL, expected_cents BIGINT, detail TEXT NOT NULL, kind TEXT NOT NULL, message_id TEXT NOT NULL, recorded_at_ms BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS payouts_by_end_to_end_id ON payouts (end_to_end_id);
