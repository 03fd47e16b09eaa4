-- Two costs of every event write that bought nothing (a pgbench lab of the events statement:
-- -10 and -7 µs per event; bench/README "The outbox's cost per validation").
--
-- `data` as json, not jsonb: it is written once and read back whole (the events API, webhook
-- bodies, the customer view), never queried inside, so jsonb's parse into its binary form and its
-- larger rows were paid on every event for nothing; json keeps the text as the worker wrote it.
ALTER TABLE events ALTER COLUMN data TYPE json USING data::json;

-- The dedupe key no longer has a unique index of its own (one more random-position index entry per
-- event, and a null one for the events without a key). Its writer holds the subject's lock, as it
-- does for the sequence, so a probe of the subject's few events finds an earlier one; the unique
-- (app, subject, environment, sequence) index stays the net for a writer without its lock. The
-- key is now also scoped to its app, as every other event look-up is.
ALTER TABLE events DROP CONSTRAINT events_dedupe_key_key;
