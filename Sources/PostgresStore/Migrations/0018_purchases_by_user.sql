-- The customer view looks a user's purchases up by (app, user). The index for that covered only
-- purchases without an expiry date (what the entitlement API reads, 0005), so a support lookup of
-- any user read every purchase of the app: 6.4 s on an idle machine over the 30 M purchases of the
-- bench's history database, and a timeout under load. Every purchase with a user now has an entry,
-- renewals too (one index write more for each); the entitlement API's query uses it as before,
-- with its expiry condition as a filter. Built before the old one is dropped, so reads of the
-- table wait only for the drop, not for the build.
CREATE INDEX in_app_purchases_by_user_idx ON in_app_purchases (app_id, user_identifier) WHERE user_identifier IS NOT NULL;
DROP INDEX in_app_purchases_user_idx;
