-- Named tokens with their creator (issue 19): every token has a name (unique among live
-- tokens, checked by `settle token create`) and records who created it; a revocation
-- records who revoked it.
--
-- The tables stay append-only: columns are added, no row is changed. A token created
-- before this migration has no stored name (NULL): it reads as its token id (the code
-- reads COALESCE(name, token_id)); its creator and its revoker read `unknown`.
ALTER TABLE api_tokens ADD COLUMN name TEXT;
ALTER TABLE api_tokens ADD COLUMN created_by TEXT NOT NULL DEFAULT 'unknown';
ALTER TABLE api_token_revocations ADD COLUMN revoked_by TEXT NOT NULL DEFAULT 'unknown';
CREATE INDEX api_tokens_by_name ON api_tokens (name);
