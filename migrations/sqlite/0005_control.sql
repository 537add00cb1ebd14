-- Trust and control (issue 19).
--
-- 1. Settings of the ledger itself, outside the event log (`migrate` writes no event):
--    `clock` is `real` or `simulated`, fixed once, by `settle migrate --simulated-clock` /
--    `--real-clock` or by the first command that may book (with `--now`: simulated).
CREATE TABLE ledger_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL, set_at_ms BIGINT NOT NULL);

-- 2. Dual control: requests that wait for a second actor (folded from `approval.*`
--    events on the platform stream).
CREATE TABLE approvals (approval_id TEXT PRIMARY KEY, kind TEXT NOT NULL, command TEXT NOT NULL, summary TEXT NOT NULL, provider_id TEXT, amount_micro_usdc BIGINT, requested_by TEXT NOT NULL, requested_at_ms BIGINT NOT NULL, status TEXT NOT NULL, decided_by TEXT, decided_at_ms BIGINT, reason TEXT);
CREATE INDEX approvals_by_status ON approvals (status, requested_at_ms);
