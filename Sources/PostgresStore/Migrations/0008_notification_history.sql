-- Where each app's recovery sweep of Apple's Get Notification History stands, per environment:
-- the window asked for and, mid-window, Apple's pagination token (a sweep interrupted by a
-- restart or an outage resumes on the same page).
CREATE TABLE notification_history_cursors (
    app_id           uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    environment      text NOT NULL CHECK (environment IN ('production', 'sandbox')),
    window_start     timestamptz NOT NULL,
    window_end       timestamptz NOT NULL,
    pagination_token text,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, environment)
);
