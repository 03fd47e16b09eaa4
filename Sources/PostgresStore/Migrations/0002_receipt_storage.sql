-- Deleting or re-keying a receipt checks the ledger's foreign key to it; without an index that is a
-- scan of every purchase per receipt (a retention purge of 25,000 receipts took minutes).
CREATE INDEX in_app_purchases_receipt_idx ON in_app_purchases (receipt_id);

-- Receipts are base64: pglz gains little on them and cost the database more CPU than any other
-- part of storing a result. Store them out of line, uncompressed.
ALTER TABLE receipts ALTER COLUMN receipt_data SET STORAGE EXTERNAL;
ALTER TABLE receipts ALTER COLUMN latest_receipt SET STORAGE EXTERNAL;
