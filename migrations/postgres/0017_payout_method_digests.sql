-- Keyed digests of the accounts providers are paid to (SPEC §11: uniqueness checks use a
-- keyed hash): HMAC-SHA256 under the blind index key (a data key in provider_keys), never
-- the account. Outside the chain; a provider's rows are replaced when its payout method
-- changes and deleted when it is erased. An approver of a new payout method is told which
-- other providers are paid to the same account.
CREATE TABLE IF NOT EXISTS payout_method_digests (
    digest TEXT COLLATE "C" NOT NULL,
    provider_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (digest, provider_id)
);
-- Byte order for the key columns, also where the table was made before.
ALTER TABLE payout_method_digests ALTER COLUMN digest TYPE TEXT COLLATE "C";
ALTER TABLE payout_method_digests ALTER COLUMN provider_id TYPE TEXT COLLATE "C";
CREATE INDEX IF NOT EXISTS payout_method_digests_provider ON payout_method_digests (provider_id);
