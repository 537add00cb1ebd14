-- The ledger: append-only events, one gapless, hash-chained sequence per stream.
-- Each event's double-entry lines and idempotency key live in its row and are covered by its hash.
CREATE TABLE events (
    stream TEXT NOT NULL,
    seq BIGINT NOT NULL,
    event_type TEXT NOT NULL,
    version BIGINT NOT NULL,
    idem_key TEXT,
    content_hash BYTEA,
    actor TEXT NOT NULL,
    recorded_at_ms BIGINT NOT NULL,
    payload TEXT NOT NULL,
    lines TEXT NOT NULL,
    prev_hash BYTEA NOT NULL,
    hash BYTEA NOT NULL,
    PRIMARY KEY (stream, seq)
);
CREATE UNIQUE INDEX events_idem_key ON events (idem_key);
CREATE INDEX events_recorded_at ON events (recorded_at_ms);

-- API tokens: stored hashed, never changed; revocation is a further row.
CREATE TABLE api_tokens (
    token_id TEXT PRIMARY KEY,
    token_hash BYTEA NOT NULL,
    scope TEXT NOT NULL,
    provider_id TEXT,
    label TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT
);
CREATE UNIQUE INDEX api_tokens_hash ON api_tokens (token_hash);
CREATE TABLE api_token_revocations (
    token_id TEXT PRIMARY KEY,
    revoked_at_ms BIGINT NOT NULL
);

-- The database itself refuses to change the ledger (row triggers, and a statement trigger
-- for TRUNCATE, on which row triggers do not fire).
CREATE FUNCTION settle_refuse_mutation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'append-only table %: % refused', TG_TABLE_NAME, TG_OP;
END
$$;
CREATE TRIGGER events_refuse_update_delete BEFORE UPDATE OR DELETE ON events FOR EACH ROW EXECUTE FUNCTION settle_refuse_mutation();
CREATE TRIGGER events_refuse_truncate BEFORE TRUNCATE ON events FOR EACH STATEMENT EXECUTE FUNCTION settle_refuse_mutation();
CREATE TRIGGER api_tokens_refuse_update_delete BEFORE UPDATE OR DELETE ON api_tokens FOR EACH ROW EXECUTE FUNCTION settle_refuse_mutation();
CREATE TRIGGER api_tokens_refuse_truncate BEFORE TRUNCATE ON api_tokens FOR EACH STATEMENT EXECUTE FUNCTION settle_refuse_mutation();
CREATE TRIGGER api_token_revocations_refuse_update_delete BEFORE UPDATE OR DELETE ON api_token_revocations FOR EACH ROW EXECUTE FUNCTION settle_refuse_mutation();
CREATE TRIGGER api_token_revocations_refuse_truncate BEFORE TRUNCATE ON api_token_revocations FOR EACH STATEMENT EXECUTE FUNCTION settle_refuse_mutation();

-- Projections: rebuilt from the events alone by `settle rebuild`.
CREATE TABLE account_balances (owner TEXT NOT NULL, account TEXT NOT NULL, balance_micro_usdc BIGINT NOT NULL, PRIMARY KEY (owner, account));
CREATE TABLE earnings_daily (provider_id TEXT NOT NULL, gpu_id TEXT NOT NULL, day BIGINT NOT NULL, model TEXT NOT NULL, gross_micro_usdc BIGINT NOT NULL, fee_micro_usdc BIGINT NOT NULL, net_micro_usdc BIGINT NOT NULL, duration_ms BIGINT NOT NULL, PRIMARY KEY (provider_id, gpu_id, day));
CREATE INDEX earnings_daily_by_day ON earnings_daily (provider_id, day);
CREATE TABLE usage_segments (gpu_id TEXT NOT NULL, started_at_ms BIGINT NOT NULL, ended_at_ms BIGINT NOT NULL, event_id TEXT NOT NULL, provider_id TEXT NOT NULL, model TEXT NOT NULL, gross_micro_usdc BIGINT NOT NULL, fee_micro_usdc BIGINT NOT NULL, net_micro_usdc BIGINT NOT NULL, PRIMARY KEY (gpu_id, started_at_ms));
CREATE INDEX usage_segments_by_provider ON usage_segments (provider_id, started_at_ms);
CREATE TABLE payable_recorded (provider_id TEXT NOT NULL, day BIGINT NOT NULL, amount_micro_usdc BIGINT NOT NULL, PRIMARY KEY (provider_id, day));
CREATE TABLE providers (provider_id TEXT PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL, tier TEXT NOT NULL, schedule TEXT NOT NULL, status TEXT NOT NULL, payout_method TEXT, method_set_at_ms BIGINT, method_invalid BIGINT NOT NULL, registered_at_ms BIGINT NOT NULL);
CREATE TABLE provider_tiers (provider_id TEXT NOT NULL, from_ms BIGINT NOT NULL, tier TEXT NOT NULL, PRIMARY KEY (provider_id, from_ms));
CREATE TABLE gpus (gpu_id TEXT PRIMARY KEY, provider_id TEXT NOT NULL, model TEXT NOT NULL, registered_at_ms BIGINT NOT NULL);
CREATE INDEX gpus_by_provider ON gpus (provider_id);
CREATE TABLE rates (provider_id TEXT NOT NULL, model TEXT NOT NULL, effective_from_ms BIGINT NOT NULL, rate_usdc_per_hour TEXT NOT NULL, PRIMARY KEY (provider_id, model, effective_from_ms));
CREATE TABLE fee_schedules (tier TEXT NOT NULL, effective_from_ms BIGINT NOT NULL, fee_bps BIGINT NOT NULL, PRIMARY KEY (tier, effective_from_ms));
CREATE TABLE payouts (payout_id TEXT PRIMARY KEY, provider_id TEXT NOT NULL, run_kind TEXT NOT NULL, run_key TEXT NOT NULL, rail TEXT NOT NULL, amount_micro_usdc BIGINT NOT NULL, amount_eur_cents BIGINT, eur_per_usd TEXT, method TEXT NOT NULL, status TEXT NOT NULL, hold_reason TEXT, failure_reason TEXT, reference TEXT, end_to_end_id TEXT, created_at_ms BIGINT NOT NULL, updated_at_ms BIGINT NOT NULL);
CREATE INDEX payouts_by_provider ON payouts (provider_id, created_at_ms);
CREATE INDEX payouts_by_status ON payouts (status, rail);
CREATE TABLE run_decisions (run_kind TEXT NOT NULL, run_key TEXT NOT NULL, provider_id TEXT NOT NULL, decision TEXT NOT NULL, available_micro_usdc BIGINT NOT NULL, amount_micro_usdc BIGINT NOT NULL, payout_id TEXT, decided_at_ms BIGINT NOT NULL, PRIMARY KEY (run_kind, run_key, provider_id));
CREATE TABLE payout_runs (run_kind TEXT NOT NULL, run_key TEXT NOT NULL, cutoff_ms BIGINT NOT NULL, candidates BIGINT NOT NULL, totals TEXT NOT NULL, completed_at_ms BIGINT NOT NULL, PRIMARY KEY (run_kind, run_key));
CREATE TABLE fx_rates (recorded_at_ms BIGINT PRIMARY KEY, eur_per_usd TEXT NOT NULL);
CREATE TABLE bank_batches (batch_id TEXT PRIMARY KEY, rail TEXT NOT NULL, file_name TEXT NOT NULL, sha256 TEXT NOT NULL, payout_ids TEXT NOT NULL, total_cents BIGINT NOT NULL, currency TEXT NOT NULL, status TEXT NOT NULL, generated_at_ms BIGINT NOT NULL, updated_at_ms BIGINT NOT NULL);
CREATE TABLE solana_attempts (attempt_id TEXT PRIMARY KEY, payout_ids TEXT NOT NULL, signature TEXT NOT NULL, blockhash TEXT NOT NULL, last_valid_block_height BIGINT NOT NULL, tx_base64 TEXT NOT NULL, transfers TEXT NOT NULL, outcome TEXT, slot BIGINT, reason TEXT, signed_at_ms BIGINT NOT NULL, resolved_at_ms BIGINT);
