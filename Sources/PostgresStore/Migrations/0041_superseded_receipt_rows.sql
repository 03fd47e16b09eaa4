-- Retention deletes a superseded receipt's row when nothing refers to it (issue 44's soak: a
-- steady app's re-validations add a row each). Whether a notification still refers to a receipt
-- is asked per receipt, and the delete's foreign key check asks it too: by this index, not by
-- reading every notification. Partial: most notifications name no receipt.
CREATE INDEX IF NOT EXISTS notifications_receipt_idx ON notifications (receipt_id) WHERE receipt_id IS NOT NULL;
