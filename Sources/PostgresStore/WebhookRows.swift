import Foundation
import Libpq
import OpenSSL
import ReceiptCore

/// The worker's side of `webhook_deliveries` and `webhook_endpoints`: what each delivery attempt
/// leaves, and the endpoint a delivery job sends to.
enum WebhookRows {
    /// An endpoint failing this long without one success is paused, and its operator told.
    static let pauseAfter: TimeInterval = 24 * 3600

    /// Records delivery outcomes: each row's status (a delivered row stays delivered, whatever a
    /// late replay says; a retried one stays `queued`, so the next event of its ordering key keeps
    /// waiting), and each endpoint's run of failures, which pauses it after ``pauseAfter``.
    static func record(_ outcomes: [DeliveryOutcome], on connection: PostgresConnection) throws {
        guard !outcomes.isEmpty else { return }
        var columns = ColumnBatch([.int8, .uuid, .text, .int4, .int4, .text, .timestamptz])
        for outcome in outcomes {
            columns.append([
                .int(Int(outcome.target.deliveryID)), .uuid(outcome.target.endpointID), .text(outcome.status.rawValue),
                .int(outcome.attempts), .int(outcome.httpStatus), .text(outcome.errorCode?.rawValue), .date(outcome.at),
            ])
        }
        _ = try connection.query(
            """
            WITH u AS (
                SELECT * FROM unnest(\(columns[0])::bigint[], \(columns[1])::uuid[], \(columns[2])::text[], \(columns[3])::int[],
                    \(columns[4])::int[], \(columns[5])::text[], \(columns[6])::timestamptz[])
                  AS u(id, endpoint_id, status, attempts, http_status, error, at)
            ), rows AS (
                UPDATE webhook_deliveries d SET
                    status = CASE WHEN d.status = 'delivered' OR u.status = 'delivered' THEN 'delivered'
                                  WHEN u.status = 'dead' THEN 'dead' ELSE 'queued' END,
                    attempts = GREATEST(d.attempts, u.attempts), last_http_status = u.http_status, last_error = u.error,
                    last_attempt_at = u.at,
                    delivered_at = CASE WHEN u.status = 'delivered' THEN COALESCE(d.delivered_at, u.at) ELSE d.delivered_at END
                FROM u WHERE d.id = u.id AND u.error IS DISTINCT FROM 'endpoint_removed'
                RETURNING d.id
            ), endpoints AS (
                SELECT endpoint_id, bool_or(status = 'delivered' AND error IS NULL) AS succeeded,
                       min(at) FILTER (WHERE status <> 'delivered') AS first_failure, max(at) AS last_at
                FROM u GROUP BY endpoint_id
            )
            UPDATE webhook_endpoints w SET
                failing_since = CASE WHEN e.succeeded THEN NULL ELSE COALESCE(w.failing_since, e.first_failure) END,
                paused_at = CASE
                    WHEN NOT e.succeeded AND w.paused_at IS NULL
                         AND COALESCE(w.failing_since, e.first_failure) <= e.last_at - make_interval(secs => \(pauseAfter))
                    THEN e.last_at ELSE w.paused_at END,
                updated_at = now()
            FROM endpoints e
            WHERE w.id = e.endpoint_id AND (e.succeeded OR e.first_failure IS NOT NULL)
              AND (w.failing_since IS NOT NULL OR NOT e.succeeded)
            """)
    }

    /// One endpoint with its secrets opened (none when they cannot be: the job then waits for an
    /// operator instead of sending unsigned).
    static func endpoint(id: UUID, secrets box: SecretBox?, on connection: PostgresConnection) throws -> WebhookEndpointRecord? {
        guard
            let row = try connection.query(
                """
                SELECT id, app_id, url, secret_sealed, previous_sealed, previous_expires_at, allow_private, paused_at, failing_since
                FROM webhook_endpoints WHERE id = \(id)
                """
            ).rows.first, let app = row.uuid("app_id"), let url = row.string("url")
        else { return nil }
        var secrets: [String] = []
        let context = Array(id.canonical.utf8)
        if let box, let sealed = row.bytes("secret_sealed"), let current = box.open(sealed, context: context) {
            secrets.append(String(decoding: current, as: UTF8.self))
            if let previous = row.bytes("previous_sealed"), let expires = row.date("previous_expires_at"), expires > Date(),
                let opened = box.open(previous, context: context)
            {
                secrets.append(String(decoding: opened, as: UTF8.self))
            }
        }
        return WebhookEndpointRecord(
            id: id, appID: app, url: url, secrets: secrets, allowPrivate: row.bool("allow_private") ?? false, pausedAt: row.date("paused_at"),
            failingSince: row.date("failing_since"))
    }
}
