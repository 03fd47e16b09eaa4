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

    public func claimPending(limit: Int, enqueue: ([WebhookDispatch]) throws -> Int) throws -> Int {
        guard limit > 0 else { return 0 }
        let scope = apps.map { PostgresArray.literal($0.map(\.uuidString)) }
        return try connection.transaction { connection in
            let rows = try connection.query(
                """
                WITH heads AS (
                    SELECT d.id FROM webhook_deliveries d
                    JOIN webhook_endpoints w ON w.id = d.endpoint_id AND w.paused_at IS NULL
                    WHERE d.status = 'pending'
                      AND (\(scope)::uuid[] IS NULL OR d.app_id = ANY(\(scope)::uuid[]))
                      AND NOT EXISTS (
                          SELECT 1 FROM webhook_deliveries p
                          WHERE p.endpoint_id = d.endpoint_id AND p.ordering_key = d.ordering_key
                            AND p.status IN ('pending', 'queued') AND p.id < d.id)
                    ORDER BY d.id
                    LIMIT \(limit)
                    FOR UPDATE OF d SKIP LOCKED
                )
                SELECT d.id AS delivery_id, d.endpoint_id, \(unescaped: PostgresEventCatalog.columns)
                FROM heads h JOIN webhook_deliveries d ON d.id = h.id JOIN events e ON e.id = d.event_id
                ORDER BY d.id
                """
            ).rows
            let dispatches = rows.compactMap { row -> (Int64, WebhookDispatch)? in
                guard let delivery = row.string("delivery_id").flatMap({ Int64($0) }), let endpoint = row.uuid("endpoint_id"),
                    let event = PostgresEventCatalog.event(row)
                else { return nil }
                let target = WebhookTarget(deliveryID: delivery, endpointID: endpoint, eventID: event.id, eventType: event.type.rawValue)
                return (delivery, WebhookDispatch(target: target, appID: event.appID, body: event.encoded()))
            }
            guard !dispatches.isEmpty else { return 0 }
            let queued = min(max(0, try enqueue(dispatches.map(\.1))), dispatches.count)
            guard queued > 0 else { return 0 }
            _ = try connection.query(
                """
                UPDATE webhook_deliveries SET status = 'queued', queued_at = now()
                WHERE id = ANY(\(PostgresArray.literal(dispatches.prefix(queued).map { String($0.0) }))::bigint[]) AND status = 'pending'
                """)
            return queued
        }
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
