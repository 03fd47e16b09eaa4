-- The webhooks page and the overview count each endpoint's dead deliveries: without this index
-- that count read every delivery the endpoint ever had.
CREATE INDEX webhook_deliveries_dead_idx ON webhook_deliveries (endpoint_id) WHERE status = 'dead';
