-- The customer view searches by transaction id too: a StoreKit 2 submission's receipt row carries
-- it. Without an index the search read every receipt of the app (over the 10 M receipts of the
-- bench's history database: 1.4 s cached and idle, 15 s cold on a busy machine). Classic receipts
-- have none and get no entry, so a validation of one writes nothing more.
CREATE INDEX receipts_transaction_idx ON receipts (app_id, transaction_id) WHERE transaction_id IS NOT NULL;
