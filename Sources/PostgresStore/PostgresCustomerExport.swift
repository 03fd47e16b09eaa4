import Foundation
import Libpq
import ReceiptCore

/// ``CustomerDataExport`` in Postgres: every table that holds a customer's data
/// (``CustomerDataSections``), read in one `REPEATABLE READ` snapshot on a connection of the
/// export's own (held for the whole document, so that its pages agree and nothing waits on the
/// API's pool), a page at a time: memory holds one page, whatever the customer's size.
public struct PostgresCustomerExport: CustomerDataExport {
    private let connect: @Sendable () throws -> PostgresConnection
    /// Rows per page of a section.
    static let pageSize = 500

    /// - Parameter connect: opens a connection for one export (closed at its end).
    public init(connect: @escaping @Sendable () throws -> PostgresConnection) { self.connect = connect }

    public func export(appID: UUID, userIdentifier: String, at now: Date, write: (String) async throws -> Void) async throws {
        let connection = try connect()
        defer { connection.close() }
        _ = try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        let apps = PostgresArray.literal([appID.uuidString])
        let users = try await connection.withConnection { try IdentityRows.customerIDs(of: userIdentifier, apps: apps, on: $0) }
        let head = JSONValue.object([
            "app_id": .string(appID.canonical), "user_identifier": .string(userIdentifier),
            "customer_ids": .array(users.map(JSONValue.string)), "exported_at": .string(ISO8601DateFormatter().string(from: now)),
        ]).encodedText
        // The head's object, left open for the sections.
        var piece = String(head.dropLast())
        let list = PostgresArray.literal(users.map { Optional($0) })
        for section in CustomerDataSections.all {
            piece += ",\"\(section.name)\":["
            var offset = 0
            var separator = ""
            while true {
                let rows = try await connection.query(section.page(appID, list, Self.pageSize, offset)).rows.compactMap { $0.string("row") }
                for row in rows {
                    piece += separator + row
                    separator = ","
                }
                try await write(piece)
                piece = ""
                if rows.count < Self.pageSize { break }
                offset += rows.count
            }
            piece = "]"
        }
        try await write(piece + "}")
        _ = try await connection.query("COMMIT")
    }
}

/// Every table that holds a customer's data, and how their rows are found: one list, so that a
/// table added for customers is added here once (the erasure of issue 44 is to read the same).
/// Each page is `row` (the row as JSON), in an order that is total within the snapshot.
enum CustomerDataSections {
    struct Section: Sendable {
        /// The document's key.
        var name: String
        /// One page of the section: (app, the customer's ids as an array literal, limit, offset).
        var page: @Sendable (UUID, String, Int, Int) -> PostgresQuery
    }

    static let all: [Section] = [
        Section(name: "aliases") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM user_aliases t
            WHERE t.app_id = \(app) AND (t.user_identifier = ANY(\(users)::text[]) OR t.alias = ANY(\(users)::text[]))
            ORDER BY t.alias LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "app_account_tokens") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM app_account_tokens t WHERE t.app_id = \(app) AND t.user_identifier = ANY(\(users)::text[])
            ORDER BY t.app_account_token LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "receipts") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM receipts t WHERE t.app_id = \(app) AND t.user_identifier = ANY(\(users)::text[])
            ORDER BY t.created_at, t.id LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "purchases") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM in_app_purchases t
            WHERE t.app_id = \(app) AND (t.user_identifier = ANY(\(users)::text[]) OR t.conflict_user_identifier = ANY(\(users)::text[]))
            ORDER BY t.id LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "shared_purchases") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM purchase_shares t WHERE t.app_id = \(app) AND t.user_identifier = ANY(\(users)::text[])
            ORDER BY t.environment, t.transaction_id, t.user_identifier LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "subscriptions") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM subscriptions t WHERE t.app_id = \(app) AND t.user_identifier = ANY(\(users)::text[])
            ORDER BY t.environment, t.original_transaction_id LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "apple_calls") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM validation_attempts t
            WHERE t.receipt_id IN (SELECT r.id FROM receipts r WHERE r.app_id = \(app) AND r.user_identifier = ANY(\(users)::text[]))
            ORDER BY t.receipt_id, t.attempt, t.seq LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "notifications") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM notifications t
            WHERE t.app_id = \(app)
              AND t.receipt_id IN (SELECT r.id FROM receipts r WHERE r.app_id = \(app) AND r.user_identifier = ANY(\(users)::text[]))
            ORDER BY t.signed_at, t.id LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "events") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM events t WHERE t.app_id = \(app) AND t.user_identifier = ANY(\(users)::text[])
            ORDER BY t.id LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "webhook_deliveries") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM webhook_deliveries t
            WHERE t.app_id = \(app)
              AND t.event_id IN (SELECT e.id FROM events e WHERE e.app_id = \(app) AND e.user_identifier = ANY(\(users)::text[]))
            ORDER BY t.id LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "entitlement_grants") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM entitlement_grants t WHERE t.app_id = \(app) AND t.user_identifier = ANY(\(users)::text[])
            ORDER BY t.granted_at, t.id LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "app_transactions") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM app_transactions t WHERE t.app_id = \(app) AND t.user_identifier = ANY(\(users)::text[])
            ORDER BY t.environment, t.user_identifier LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "consumption") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM customer_consumption t WHERE t.app_id = \(app) AND t.user_identifier = ANY(\(users)::text[])
            ORDER BY t.user_identifier LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "consumption_answers") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM consumption_answers t WHERE t.app_id = \(app) AND t.user_identifier = ANY(\(users)::text[])
            ORDER BY t.claimed_at, t.notification_id LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "audit") { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM audit_log t WHERE t.app_id = \(app) AND t.user_identifiers && \(users)::text[]
            ORDER BY t.id LIMIT \(limit) OFFSET \(offset)
            """
        },
    ]
}
