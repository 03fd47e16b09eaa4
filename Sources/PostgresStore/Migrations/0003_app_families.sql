-- An app family: receipts of several bundle ids (an iOS app and its macOS or older editions) belong
-- to one app; a receipt of any other bundle id is refused as not this app's (402).
ALTER TABLE apps ADD COLUMN other_bundle_ids text[] NOT NULL DEFAULT '{}';

-- Tokens are found by their public prefix, then their SHA-256 is compared in constant time.
CREATE INDEX api_tokens_prefix_idx ON api_tokens (prefix) WHERE revoked_at IS NULL;
