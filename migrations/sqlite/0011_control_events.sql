-- Dual control (SPEC §9): the events a gated command can book are read by type across all
-- streams (a payout run holds a provider whose balance includes one without a verified
-- approval; `verify` names it). Usage events, the bulk of the ledger, are left out of the
-- index, so booking them maintains nothing more.
CREATE INDEX events_control_types ON events (event_type, stream, seq) WHERE event_type <> 'usage.recorded';

-- A `rate.set` is judged against the price book: other providers' rates of the model in
-- force by its start, the latest first.
CREATE INDEX rates_by_model ON rates (model, effective_from_ms);

-- A token of scope admin or metering on a controlled ledger is created waiting for a second
-- operator's approval: it authenticates nothing until its activation is recorded, in the
-- approval's own transaction. The tables stay append-only.
ALTER TABLE api_tokens ADD COLUMN needs_approval INTEGER NOT NULL DEFAULT 0;
CREATE TABLE api_token_activations (token_id TEXT PRIMARY KEY, approval_id TEXT NOT NULL, activated_at_ms BIGINT NOT NULL, activated_by TEXT NOT NULL);

-- The payer checks its lookup tables against what its own journaled transactions put in
-- them, in the order they were signed: attempts signed within one millisecond (a simulated
-- clock) are ordered by their `solana_tx.signed` event's position on the platform stream.
ALTER TABLE solana_attempts ADD COLUMN signed_seq BIGINT;
UPDATE solana_attempts SET signed_seq = (SELECT e.seq FROM events AS e WHERE e.idem_key = 'solana_tx:' || solana_attempts.attempt_id || ':signed' AND e.stream = 'platform');
