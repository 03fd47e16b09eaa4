-- Notification-aware re-polls (issue 42 item 3): a subscription that a Server Notification V2
-- reached after its last poll, for an app whose notifications are arriving, is polled only as a
-- safety net (ReceiptCore's RepollSafetyNet decides; the scheduler's claim writes the skip).

-- When the last V2 notification was applied to the subscription (written with its state, in the
-- notification's transaction), and the poll a skip moved away: should the app's notifications
-- stop, the subscription gets that poll back (today's schedule).
ALTER TABLE subscriptions ADD COLUMN notified_at timestamptz, ADD COLUMN skipped_poll_at timestamptz;
-- The fallback's read path: only skipped rows are indexed, per app and environment.
CREATE INDEX subscriptions_skipped_idx ON subscriptions (app_id, environment) WHERE skipped_poll_at IS NOT NULL;

-- When each app's last V2 notification arrived, per environment (sandbox notifications say nothing
-- about production's). Written at most about once a minute per app: not a hot row for the workers.
CREATE TABLE app_notification_activity (
    app_id               uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    environment          text NOT NULL,
    last_notification_at timestamptz NOT NULL,
    PRIMARY KEY (app_id, environment)
);
