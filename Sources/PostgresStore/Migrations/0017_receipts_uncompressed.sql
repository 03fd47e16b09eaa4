-- A receipt (and Apple's latest_receipt) is base64 of signed, mostly random bytes: pglz finds no
-- repeats in it and gives up, but only after trying: a lab of 2,000 rows of two 5.6 KB columns took
-- 116 ms with the attempt and 91 ms without, and the outbox row (scripts/bench outbox, twice each
-- way, alternating) 190–198 µs of Postgres CPU per validation with it, 158–175 without.
-- EXTERNAL keeps them out of line in TOAST as before, without the attempt. Rows already stored keep
-- whatever they have; no rewrite.
ALTER TABLE receipts ALTER COLUMN receipt_data SET STORAGE EXTERNAL, ALTER COLUMN latest_receipt SET STORAGE EXTERNAL;
