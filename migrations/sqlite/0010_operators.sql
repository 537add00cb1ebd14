-- Operators (SPEC §9): who requested and who decided a dual-control request, as operators
-- whose Ed25519 signatures are on the chain (`approval.requested`, `approval.decided`), and
-- the content hash both signatures cover. NULL on requests booked without operators.
ALTER TABLE approvals ADD COLUMN content_hash TEXT;
ALTER TABLE approvals ADD COLUMN requester_operator TEXT;
ALTER TABLE approvals ADD COLUMN decider_operator TEXT;
