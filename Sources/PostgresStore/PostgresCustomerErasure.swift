import Foundation
import Libpq
import ReceiptCore

/// ``CustomerErasure`` in Postgres: every section of ``CustomerDataSections`` erased as the
/// section says, in one transaction with the audit line and the `customer.erased` event, so that
/// an erasure is whole or not at all.
///
/// One transaction, not batches: a customer's rows are found by index (a user id, an app), and even
/// a heavy customer's few thousand rows are changed in well under a second, so the row locks are
/// held that long; the rows of other customers are not touched.
public struct PostgresCustomerErasure: CustomerErasure {
    private let pool: PostgresConnectionPool

    /// Creates the store on `pool`.
    public init(pool: PostgresConnectionPool) { self.pool = pool }

    public func erase(appID: UUID, userIdentifier: String, erasureID: UUID, audit: AuditAction, at: Date) async throws -> ErasedCustomer? {
        try await pool.withConnection { connection in
            try connection.transaction {
                try Self.erase(appID: appID, userIdentifier: userIdentifier, erasureID: erasureID, audit: audit, at: at, on: $0)
            }
        }
    }

    static func erase(
        appID: UUID, userIdentifier: String, erasureID: UUID, audit: AuditAction, at: Date, on connection: PostgresConnection
    ) throws -> ErasedCustomer? {
        // No app, no customer: refused audit lines may name an unknown app id, and the event could not be filed.
        guard try !connection.query("SELECT 1 FROM apps WHERE id = \(appID)").rows.isEmpty else { return nil }
        let users = try IdentityRows.customerIDs(of: userIdentifier, apps: PostgresArray.literal([appID.uuidString]), on: connection)
        let list = PostgresArray.literal(users.map { Optional($0) })
        // Read before any section is erased: the receipts' user and the events are gone after.
        // Earlier `customer.erased` events stay: they are the erasure's own record (a repeated
        // erasure then finds nothing, and answers so).
        _ = try connection.query(
            """
            CREATE TEMPORARY TABLE erased_receipts ON COMMIT DROP AS
            SELECT id FROM receipts WHERE app_id = \(appID) AND user_identifier = ANY(\(list)::text[])
            """)
        _ = try connection.query(
            """
            CREATE TEMPORARY TABLE erased_events ON COMMIT DROP AS
            SELECT id FROM events
            WHERE app_id = \(appID) AND user_identifier = ANY(\(list)::text[]) AND type <> \(EventType.customerErased.rawValue)
            """)
        let receiptIDs = try connection.query("SELECT id FROM erased_receipts").rows.compactMap { $0.uuid("id") }
        let eventIDs = try connection.query("SELECT id FROM erased_events").rows.compactMap { $0.uuid("id") }
        var changed = 0
        for section in CustomerDataSections.all {
            guard case .statement(let statement) = section.erasure else { continue }
            changed += try connection.query(statement(appID, list)).affectedRows
        }
        guard changed > 0 else { return nil }
        _ = try AuditRows.begin(audit, outcome: "done", on: connection)
        var ids = MonotonicEventIDs()
        try EventRows.insert(
            [.erased(userIdentifier: userIdentifier, erasureID: erasureID, appID: appID, occurredAt: at, id: ids.next(at: at))], on: connection)
        return ErasedCustomer(
            erasureID: erasureID, appID: appID, userIdentifier: userIdentifier, userIdentifiers: Set(users), receiptIDs: Set(receiptIDs),
            eventIDs: Set(eventIDs))
    }
}
