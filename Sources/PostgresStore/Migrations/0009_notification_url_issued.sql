-- When each app's notification URL was issued: an app is expected to hear from Apple within a day
-- of it (the "notifications silent" alert), not before.
ALTER TABLE apps ADD COLUMN notification_token_issued_at timestamptz;
UPDATE apps SET notification_token_issued_at = updated_at WHERE notification_token_sha256 IS NOT NULL;
