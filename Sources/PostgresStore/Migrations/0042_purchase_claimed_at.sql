-- When the owner of a ledger row presented it: the door's acceptance time of the job that claimed
-- it (issue 45). Transfer rules judge two users' claims by it, not by the order their validations
-- were stored: Apple's delay (a 503, a 429, an outage) can store a later presentation first.
-- NULL for rows stored before this column and rows no client claimed (a notification's, an
-- import's without a user): those keep the storage order. Nullable without a default: adding it
-- rewrites nothing.
ALTER TABLE in_app_purchases ADD COLUMN IF NOT EXISTS claimed_at timestamptz;
