-- The bank's answers (SPEC §10): status reports, notifications, statements and NACHA
-- returns are matched to payouts by end-to-end id (the payouts' `end_to_end_id`, indexed
-- here), and every file booked is kept once, with the entries of it that booked nothing
-- (unmatched, another amount, a batch never sent): projections of `bank_answer.imported`.
-- Identifiers compare as bytes (see 0009). Written so that running it again changes
-- nothing but the collation of its identifiers, which it sets.
CREATE TABLE IF NOT EXISTS bank_answer_files (kind TEXT COLLATE "C" NOT NULL, message_id TEXT COLLATE "C" NOT NULL, sha256 TEXT NOT NULL, entries BIGINT NOT NULL, matched BIGINT NOT NULL, exceptions BIGINT NOT NULL, imported_at_ms BIGINT NOT NULL, PRIMARY KEY (kind, message_id));
CREATE TABLE IF NOT EXISTS bank_answer_exceptions (entry_key TEXT COLLATE "C" PRIMARY KEY, problem TEXT NOT NULL, reference TEXT NOT NULL, batch_id TEXT, amount_cents BIGINT NOT NULL, currency TEXT NOT NULL, expected_cents BIGINT, detail TEXT NOT NULL, kind TEXT NOT NULL, message_id TEXT NOT NULL, recorded_at_ms BIGINT NOT NULL);
ALTER TABLE bank_answer_files ALTER COLUMN kind TYPE TEXT COLLATE "C", ALTER COLUMN message_id TYPE TEXT COLLATE "C";
ALTER TABLE bank_answer_exceptions ALTER COLUMN entry_key TYPE TEXT COLLATE "C";
ALTER TABLE payouts ALTER COLUMN end_to_end_id TYPE TEXT COLLATE "C";
CREATE INDEX IF NOT EXISTS payouts_by_end_to_end_id ON payouts (end_to_end_id);
