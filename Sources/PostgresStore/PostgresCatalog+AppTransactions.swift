import Foundation
import Libpq
import ReceiptCore

/// `/client/app-transactions`' store: one row per app, environment and user (migration 0024).
extension PostgresCatalog: AppTransactionCatalog {
    static let appTransactionColumns = """
        app_id, environment, user_identifier, app_transaction_id, bundle_id, app_apple_id, application_version,
        original_application_version, original_purchase_date, receipt_creation_date, preorder_date, original_platform,
        signed_at, stored_at, payload::text AS payload
        """

    public func store(_ record: AppTransactionRecord) async throws -> AppTransactionRecord {
        let stored = try await write { connection in
            // An older signed one (a device replaying what it cached) never replaces a newer one:
            // the row is left alone and read back.
            try connection.query(
                """
                INSERT INTO app_transactions (app_id, environment, user_identifier, app_transaction_id, bundle_id, app_apple_id,
                    application_version, original_application_version, original_purchase_date, receipt_creation_date,
                    preorder_date, original_platform, signed_at, stored_at, payload)
                VALUES (\(record.appID), \(record.environment), \(record.userIdentifier), \(record.appTransactionID), \(record.bundleID),
                    \(record.appAppleID), \(record.applicationVersion), \(record.originalApplicationVersion),
                    \(record.originalPurchaseDate), \(record.receiptCreationDate), \(record.preorderDate), \(record.originalPlatform),
                    \(record.signedDate), \(record.storedAt), \(record.payload.encodedText)::jsonb)
                ON CONFLICT (app_id, environment, user_identifier) DO UPDATE SET
                    app_transaction_id = excluded.app_transaction_id, bundle_id = excluded.bundle_id,
                    app_apple_id = excluded.app_apple_id, application_version = excluded.application_version,
                    original_application_version = excluded.original_application_version,
                    original_purchase_date = excluded.original_purchase_date, receipt_creation_date = excluded.receipt_creation_date,
                    preorder_date = excluded.preorder_date, original_platform = excluded.original_platform,
                    signed_at = excluded.signed_at, stored_at = excluded.stored_at, payload = excluded.payload
                WHERE app_transactions.signed_at <= excluded.signed_at
                """)
            return try connection.query(
                """
                SELECT \(unescaped: Self.appTransactionColumns) FROM app_transactions
                WHERE app_id = \(record.appID) AND environment = \(record.environment) AND user_identifier = \(record.userIdentifier)
                """
            ).rows.first.flatMap(Self.appTransaction)
        }
        return stored ?? record
    }

    public func appTransactions(appID: UUID, userIdentifier: String) async throws -> [AppTransactionRecord] {
        try await lookup { connection in
            try connection.query(
                """
                SELECT \(unescaped: Self.appTransactionColumns) FROM app_transactions
                WHERE app_id = \(appID) AND user_identifier = \(userIdentifier)
                ORDER BY environment
                """
            ).rows.compactMap(Self.appTransaction)
        }
    }

    /// A write on the pool; a value Postgres refuses (a NUL in a user identifier) is the client's
    /// mistake, reported like a lookup's.
    private func write<T: Sendable>(_ body: @Sendable (PostgresConnection) throws -> T) async throws -> T {
        do {
            return try await pool.withConnection(body)
        } catch let error as PostgresError where error.isDataError {
            throw StoreFailure(
                code: error.sqlState.map { .sqlState($0) } ?? .driver("\(error.code)"), message: "Postgres refused the value: \(error.message)",
                isPermanent: true)
        }
    }

    static func appTransaction(_ row: PostgresRow) -> AppTransactionRecord? {
        guard let app = row.uuid("app_id"), let environment = row.string("environment"), let user = row.string("user_identifier"),
            let bundle = row.string("bundle_id"), let original = row.string("original_application_version"),
            let purchased = row.date("original_purchase_date"), let signed = row.date("signed_at"), let stored = row.date("stored_at")
        else { return nil }
        return AppTransactionRecord(
            appID: app, environment: environment, userIdentifier: user, appTransactionID: row.string("app_transaction_id"), bundleID: bundle,
            appAppleID: row.string("app_apple_id").flatMap { Int64($0) }, applicationVersion: row.string("application_version"),
            originalApplicationVersion: original, originalPurchaseDate: purchased, receiptCreationDate: row.date("receipt_creation_date"),
            preorderDate: row.date("preorder_date"), originalPlatform: row.string("original_platform"), signedDate: signed,
            storedAt: stored, payload: row.string("payload").flatMap { try? JSONValue.parse(Array($0.utf8)) } ?? .object([:]))
    }
}
