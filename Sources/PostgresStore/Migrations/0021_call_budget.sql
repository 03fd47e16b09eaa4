-- Issue 42, items 1 and 2: the call budget per validation and incremental history.
--
-- jws_trust: how far a StoreKit 2 transaction verified at the door is trusted ('local': stored
-- without a call when Apple signed it within jws_freshness_seconds; 'apple': one call). NULL is the
-- default, decided when read: 'local' for an app whose V2 notification URL is set up, else 'apple'.
ALTER TABLE apps
    ADD COLUMN jws_trust text CHECK (jws_trust IN ('local', 'apple')),
    ADD COLUMN jws_freshness_seconds integer NOT NULL DEFAULT 86400 CHECK (jws_freshness_seconds > 0);

-- A record trusted locally says so: validated by the door's JWS check, not by a call.
ALTER TABLE receipts DROP CONSTRAINT receipts_validated_by_check;
ALTER TABLE receipts ADD CONSTRAINT receipts_validated_by_check
    CHECK (validated_by IN ('verify_receipt', 'server_api', 'local_jws'));

-- The revision of the last Get Transaction History page read for a customer (an original
-- transaction of an app): the next read starts there, so only new transactions are fetched and
-- verified. Its presence also means the customer was seen: a later purchase costs one call, not the
-- whole history. An operator's resync reads from the start again and replaces it.
CREATE TABLE transaction_history_cursors (
    app_id                  uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    original_transaction_id text NOT NULL,
    environment             text NOT NULL CHECK (environment IN ('production', 'sandbox')),
    revision                text NOT NULL,
    updated_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, original_transaction_id)
);
