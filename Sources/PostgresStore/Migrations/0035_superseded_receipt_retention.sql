-- Retention of superseded receipts' texts (issue 44): an app may keep them its own number of days.
ALTER TABLE app_retention DROP CONSTRAINT app_retention_kind_check;
ALTER TABLE app_retention ADD CONSTRAINT app_retention_kind_check
    CHECK (kind IN ('apple_call_attempts', 'notifications', 'events', 'webhook_deliveries', 'audit_log',
                    'superseded_receipts'));

-- Whether a receipt's subscription still reads its text (the re-poll sends it to Apple).
CREATE INDEX IF NOT EXISTS subscriptions_receipt_idx ON subscriptions (receipt_id);
-- The receipts that still hold a text, in the order the step walks them: a receipt whose text is
-- emptied leaves the index, so the walk passes only the texts kept (a user's latest receipt).
CREATE INDEX IF NOT EXISTS receipts_text_kept_idx ON receipts (created_at, id)
    WHERE octet_length(receipt_data) > 0 OR latest_receipt IS NOT NULL;
