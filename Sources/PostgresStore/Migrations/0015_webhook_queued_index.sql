-- The dispatcher looks again at deliveries queued longer than WEBHOOK_REQUEUE_AFTER_SECONDS (is
-- the job still in Redis?), oldest check first: this keeps that look on the queued rows alone.
CREATE INDEX webhook_deliveries_queued_idx ON webhook_deliveries (queued_at) WHERE status = 'queued';
