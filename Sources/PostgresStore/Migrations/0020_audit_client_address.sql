-- The audit log names the client address of each admin request (issue 41), and records the
-- privileged attempts a role did not allow ('refused') next to the actions taken.

ALTER TABLE audit_log ADD COLUMN client_address text;
ALTER TABLE audit_log DROP CONSTRAINT audit_log_outcome_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_outcome_check CHECK (outcome IN ('started', 'done', 'failed', 'refused'));
