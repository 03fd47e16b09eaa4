import Foundation
import Libpq
import ReceiptCore

/// The dispatcher's Postgres side: claims the deliveries that may go now with `FOR UPDATE SKIP
/// LOCKED`, so dispatcher replicas share the work.
///
/// A delivery may go when it is the first unsettled one of its endpoint and ordering key (a user,
/// or a subscription without one) and its endpoint is not paused: the next event for a user waits
/// while an earlier one is being retried, so a backend sees each user's events in order.
///
/// Not thread-safe: the dispatcher's thread owns it.
public final class PostgresWebhookOutbox: WebhookOutbox {
    private let connection: PostgresConnection
    private let apps: [UUID]?

    /// Creates the outbox on the dispatcher's own connection.
    /// - Parameter apps: only these apps' deliveries (a test sharing its database); nil for all.
    public init(connection: PostgresConnection, apps: [UUID]? = nil) {
        self.connection = connection
        self.apps = apps
    }

    public func claimPending(limit: Int, enqueue: ([WebhookDispatch]) throws -> Void) throws -> Int {
        guard limit > 0 else { return 0 }
        let scope = apps.map { PostgresArray.literal($0.map(\.uuidString)) }
        return try connection.transaction { connection in
            // Claimed and marked `queued` in one statement; the Redis script runs before COMMIT, so
            // a failure there rolls the mark back. "First open delivery of its key" is a per-row
            // subquery on the open index rather than NOT EXISTS, which the planner may turn into an
            // anti-join over every open delivery (most likely what made the first bench run of a
            // freshly grown table 4x slower); a probe per candidate is the plan it invites.
            let rows = try connection.query(
                """
                WITH heads AS (
                    SELECT d.id FROM webhook_deliveries d
                    JOIN webhook_endpoints w ON w.id = d.endpoint_id AND w.paused_at IS NULL
                    WHERE d.status = 'pending'
                      AND (\(scope)::uuid[] IS NULL OR d.app_id = ANY(\(scope)::uuid[]))
                      AND d.id = (
                          SELECT p.id FROM webhook_deliveries p
                          WHERE p.endpoint_id = d.endpoint_id AND p.ordering_key = d.ordering_key AND p.status IN ('pending', 'queued')
                          ORDER BY p.id LIMIT 1)
                    ORDER BY d.id
                    LIMIT \(limit)
                    FOR UPDATE OF d SKIP LOCKED
                ), marked AS (
                    UPDATE webhook_deliveries d SET status = 'queued', queued_at = now()
                    FROM heads h WHERE d.id = h.id
                \(unescaped: Self.markedDispatches)
                """
            ).rows
            let dispatches = rows.compactMap(Self.dispatch)
            guard !dispatches.isEmpty else { return 0 }
            // Then every claimed delivery is in the queue, or already was (its marker says so).
            try enqueue(dispatches)
            return dispatches.count
        }
    }

    public func recheckQueued(
        olderThan: Duration, limit: Int, requeue: ([WebhookDispatch]) throws -> Int
    ) throws -> (checked: Int, requeued: Int) {
        guard limit > 0 else { return (0, 0) }
        let scope = apps.map { PostgresArray.literal($0.map(\.uuidString)) }
        return try connection.transaction { connection in
            // `queued_at` becomes "last known queued": the next look at this delivery is one
            // `olderThan` later. Locked, so a worker's settlement waits for this commit (and then
            // settles it as usual: at worst a lost job's delivery is sent twice, same event id).
            let rows = try connection.query(
                """
                WITH stale AS (
                    SELECT d.id FROM webhook_deliveries d
                    WHERE d.status = 'queued' AND d.queued_at < now() - make_interval(secs => \(olderThan.seconds))
                      AND (\(scope)::uuid[] IS NULL OR d.app_id = ANY(\(scope)::uuid[]))
                    ORDER BY d.queued_at
                    LIMIT \(limit)
                    FOR UPDATE OF d SKIP LOCKED
                ), marked AS (
                    UPDATE webhook_deliveries d SET queued_at = now()
                    FROM stale s WHERE d.id = s.id
                \(unescaped: Self.markedDispatches)
                """
            ).rows
            let dispatches = rows.compactMap(Self.dispatch)
            guard !dispatches.isEmpty else { return (rows.count, 0) }
            return (rows.count, try requeue(dispatches))
        }
    }

    /// The end of both claims: the `marked` CTE's rows with their events, as ``dispatch(_:)`` reads them.
    private static let markedDispatches = """
            RETURNING d.id, d.endpoint_id, d.event_id
        )
        SELECT m.id AS delivery_id, m.endpoint_id, \(PostgresEventCatalog.columns)
        FROM marked m JOIN events e ON e.id = m.event_id
        ORDER BY m.id
        """

    /// A claimed delivery's row (its id, endpoint and event) as the job that sends it.
    private static func dispatch(_ row: PostgresRow) -> WebhookDispatch? {
        guard let delivery = row.string("delivery_id").flatMap({ Int64($0) }), let endpoint = row.uuid("endpoint_id"),
            let event = PostgresEventCatalog.event(row)
        else { return nil }
        let target = WebhookTarget(deliveryID: delivery, endpointID: endpoint, eventID: event.id, eventType: event.type.rawValue)
        return WebhookDispatch(target: target, appID: event.appID, body: event.encoded())
    }

    public func pausedEndpoints() throws -> Int {
        let scope = apps.map { PostgresArray.literal($0.map(\.uuidString)) }
        return try connection.query(
            """
            SELECT count(*) AS n FROM webhook_endpoints
            WHERE paused_at IS NOT NULL AND (\(scope)::uuid[] IS NULL OR app_id = ANY(\(scope)::uuid[]))
            """
        ).rows.first?.int("n") ?? 0
    }
}
