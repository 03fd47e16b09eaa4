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

/// Every table that holds a customer's data, how their rows are found (the export) and how they are
/// erased (``PostgresCustomerErasure``): one list, so that a table added for customers is added
/// here once, for both, and a section cannot be written without its erasure.
/// Each page is `row` (the row as JSON), in an order that is total within the snapshot.
enum CustomerDataSections {
    struct Section: Sendable {
        /// The document's key.
        var name: String
        /// The table it reads.
        var table: String
        /// One page of the section: (app, the customer's ids as an array literal, limit, offset).
        var page: @Sendable (UUID, String, Int, Int) -> PostgresQuery
        /// How the erasure treats the section's rows.
        var erasure: Erasure

        init(name: String, table: String, erasure: Erasure, page: @escaping @Sendable (UUID, String, Int, Int) -> PostgresQuery) {
            self.name = name
            self.table = table
            self.erasure = erasure
            self.page = page
        }
    }

    /// What erasing a customer does to a section's rows. The statements run in one transaction in
    /// which `erased_receipts` and `erased_events` (temporary tables) hold the ids of the
    /// customer's receipts and events, read before any statement ran, so that the order of the
    /// sections does not matter.
    enum Erasure: Sendable {
        /// One statement deletes or anonymises the rows: (app, the customer's ids as an array literal).
        case statement(@Sendable (UUID, String) -> PostgresQuery)
        /// The rows hold nothing of the customer once the named section is erased (they are found
        /// through it: a receipt's calls to Apple, an event's deliveries).
        case through(String)
    }

    /// A section whose rows are the customer's own by `user_identifier`: read in `order` (columns
    /// of `t`), deleted whole by the erasure.
    static func owned(name: String, table: String, order: String) -> Section {
        Section(
            name: name, table: table,
            erasure: .statement { app, users in
                "DELETE FROM \(unescaped: table) WHERE app_id = \(app) AND user_identifier = ANY(\(users)::text[])"
            }
        ) { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM \(unescaped: table) t WHERE t.app_id = \(app) AND t.user_identifier = ANY(\(users)::text[])
            ORDER BY \(unescaped: order) LIMIT \(limit) OFFSET \(offset)
            """
        }
    }

    static let all: [Section] = [
        Section(
            name: "aliases", table: "user_aliases",
            erasure: .statement { app, users in
                "DELETE FROM user_aliases WHERE app_id = \(app) AND (user_identifier = ANY(\(users)::text[]) OR alias = ANY(\(users)::text[]))"
            }
        ) { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM user_aliases t
            WHERE t.app_id = \(app) AND (t.user_identifier = ANY(\(users)::text[]) OR t.alias = ANY(\(users)::text[]))
            ORDER BY t.alias LIMIT \(limit) OFFSET \(offset)
            """
        },
        owned(name: "app_account_tokens", table: "app_account_tokens", order: "t.app_account_token"),
        Section(
            name: "receipts", table: "receipts",
            erasure: .statement { _, _ in
                // Kept, emptied: the ledger's purchases and subscriptions point at the receipt.
                """
                UPDATE receipts SET user_identifier = NULL, identifier_for_vendor = NULL, country_code = NULL, ip_address = NULL,
                    metadata = NULL, receipt_data = '', latest_receipt = NULL, fraud_reason = NULL, updated_at = now()
                WHERE id IN (SELECT id FROM erased_receipts)
                """
            }
        ) { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM receipts t WHERE t.app_id = \(app) AND t.user_identifier = ANY(\(users)::text[])
            ORDER BY t.created_at, t.id LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(
            name: "purchases", table: "in_app_purchases",
            erasure: .statement { app, users in
                // The ledger keeps the amounts without the user; a purchase another user also holds
                // (a share, or the conflict's other side) keeps that user.
                """
                UPDATE in_app_purchases SET
                    app_account_token = CASE WHEN user_identifier = ANY(\(users)::text[]) THEN NULL ELSE app_account_token END,
                    user_identifier = CASE WHEN user_identifier = ANY(\(users)::text[]) THEN NULL ELSE user_identifier END,
                    conflict_user_identifier = CASE WHEN conflict_user_identifier = ANY(\(users)::text[]) THEN NULL
                                                    ELSE conflict_user_identifier END,
                    updated_at = now()
                WHERE app_id = \(app) AND (user_identifier = ANY(\(users)::text[]) OR conflict_user_identifier = ANY(\(users)::text[]))
                """
            }
        ) { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM in_app_purchases t
            WHERE t.app_id = \(app) AND (t.user_identifier = ANY(\(users)::text[]) OR t.conflict_user_identifier = ANY(\(users)::text[]))
            ORDER BY t.id LIMIT \(limit) OFFSET \(offset)
            """
        },
        // The customer's links only: the other users' shares of the same transactions stay.
        owned(name: "shared_purchases", table: "purchase_shares", order: "t.environment, t.transaction_id, t.user_identifier"),
        Section(
            name: "subscriptions", table: "subscriptions",
            erasure: .statement { app, users in
                // Kept without the user (the ledger); no longer re-polled, unless another user shares it.
                """
                UPDATE subscriptions s SET user_identifier = NULL, last_poll_error = NULL, updated_at = now(),
                    next_poll_at = CASE WHEN EXISTS (
                        SELECT 1 FROM purchase_shares p JOIN in_app_purchases i
                          ON i.environment = p.environment AND i.transaction_id = p.transaction_id
                        WHERE p.app_id = s.app_id AND i.original_transaction_id = s.original_transaction_id
                          AND i.environment = s.environment AND p.user_identifier <> ALL(\(users)::text[]))
                    THEN s.next_poll_at END
                WHERE s.app_id = \(app) AND s.user_identifier = ANY(\(users)::text[])
                """
            }
        ) { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM subscriptions t WHERE t.app_id = \(app) AND t.user_identifier = ANY(\(users)::text[])
            ORDER BY t.environment, t.original_transaction_id LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "apple_calls", table: "validation_attempts", erasure: .through("receipts")) { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM validation_attempts t
            WHERE t.receipt_id IN (SELECT r.id FROM receipts r WHERE r.app_id = \(app) AND r.user_identifier = ANY(\(users)::text[]))
            ORDER BY t.receipt_id, t.attempt, t.seq LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(
            name: "notifications", table: "notifications",
            erasure: .statement { app, _ in
                // Kept for their uuids (Apple's retries stay deduplicated), without Apple's payload,
                // which can carry the receipt.
                """
                -- Found by the receipts' original transactions (indexed), not by receipt_id (not).
                UPDATE notifications SET payload = '{}'::jsonb
                WHERE app_id = \(app) AND receipt_id IN (SELECT id FROM erased_receipts)
                  AND original_transaction_id IN (
                    SELECT original_transaction_id FROM in_app_purchases WHERE receipt_id IN (SELECT id FROM erased_receipts))
                """
            }
        ) { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM notifications t
            WHERE t.app_id = \(app)
              AND t.receipt_id IN (SELECT r.id FROM receipts r WHERE r.app_id = \(app) AND r.user_identifier = ANY(\(users)::text[]))
            ORDER BY t.signed_at, t.id LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(
            name: "events", table: "events",
            erasure: .statement { app, _ in
                // Their webhook deliveries go with them (ON DELETE CASCADE).
                "DELETE FROM events WHERE app_id = \(app) AND id IN (SELECT id FROM erased_events)"
            }
        ) { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM events t WHERE t.app_id = \(app) AND t.user_identifier = ANY(\(users)::text[])
            ORDER BY t.id LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(name: "webhook_deliveries", table: "webhook_deliveries", erasure: .through("events")) { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM webhook_deliveries t
            WHERE t.app_id = \(app)
              AND t.event_id IN (SELECT e.id FROM events e WHERE e.app_id = \(app) AND e.user_identifier = ANY(\(users)::text[]))
            ORDER BY t.id LIMIT \(limit) OFFSET \(offset)
            """
        },
        owned(name: "entitlement_grants", table: "entitlement_grants", order: "t.granted_at, t.id"),
        owned(name: "app_transactions", table: "app_transactions", order: "t.environment, t.user_identifier"),
        owned(name: "consumption", table: "customer_consumption", order: "t.user_identifier"),
        Section(
            name: "consumption_answers", table: "consumption_answers",
            erasure: .statement { app, users in
                // Kept for their claims (one answer per notification), without the user or what was sent.
                """
                UPDATE consumption_answers SET user_identifier = NULL, answer = NULL
                WHERE app_id = \(app) AND user_identifier = ANY(\(users)::text[])
                """
            }
        ) { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM consumption_answers t WHERE t.app_id = \(app) AND t.user_identifier = ANY(\(users)::text[])
            ORDER BY t.claimed_at, t.notification_id LIMIT \(limit) OFFSET \(offset)
            """
        },
        Section(
            name: "audit", table: "audit_log",
            erasure: .statement { app, users in
                // Who did what stays; whom it was done to goes (a line's target names its customer).
                """
                UPDATE audit_log SET target = '(erased customer)',
                    user_identifiers = ARRAY(SELECT u FROM unnest(user_identifiers) u WHERE u <> ALL(\(users)::text[]))
                WHERE app_id = \(app) AND user_identifiers && \(users)::text[]
                """
            }
        ) { app, users, limit, offset in
            """
            SELECT row_to_json(t)::text AS row FROM audit_log t WHERE t.app_id = \(app) AND t.user_identifiers && \(users)::text[]
            ORDER BY t.id LIMIT \(limit) OFFSET \(offset)
            """
        },
    ]
}
