import Foundation
import Libpq
import ReceiptCore

/// One worker lane's `ReceiptStore` on its own Postgres connection.
///
/// Not thread-safe: a lane owns it and calls it from its own thread.
public final class PostgresReceiptStore: ReceiptStore {
    private let connection: PostgresConnection
    private var apps: [UUID: (record: AppRecord, loadedAt: Date)] = [:]
    private let appCacheTTL: TimeInterval = 30

    /// Creates a store on `connection`.
    public init(connection: PostgresConnection) {
        self.connection = connection
    }

    public func app(id: UUID) throws -> AppRecord? {
        if let cached = apps[id], Date().timeIntervalSince(cached.loadedAt) < appCacheTTL { return cached.record }
        let rows = try connection.query(
            "SELECT id, name, bundle_id, shared_secret, exclude_old_transactions FROM apps WHERE id = \(id)"
        ).rows
        guard let record = rows.first.flatMap(AppAdmin.appRecord) else { return nil }
        apps[id] = (record, Date())
        return record
    }

    public func save(_ record: ValidationRecord) throws -> ReceiptResource {
        let envelope = record.envelope
        let submission = envelope.submission
        let environment = record.environment ?? envelope.environment ?? "unknown"
        let transactionIDs = record.purchases.map(\.transactionID)
        let metadata = submission.metadata.flatMap { try? JSONEncoder().encode($0) }.map { String(decoding: $0, as: UTF8.self) }
        return try connection.transaction { connection in
            // Idempotent: a replay writes the same values, and the WHERE makes it a no-op (updated_at included).
            _ = try connection.query(
                """
                INSERT INTO receipts (id, app_id, style, bundle_id, environment, status, apple_status, user_identifier,
                    identifier_for_vendor, country_code, ip_address, metadata, receipt_data, latest_receipt,
                    transaction_ids, error_code, created_at, validated_at)
                VALUES (\(envelope.id), \(envelope.appID), \(envelope.style?.rawValue), \(envelope.bundleID), \(environment),
                    \(record.status.rawValue), \(record.appleStatus), \(submission.userIdentifier),
                    \(submission.identifierForVendor), \(submission.countryCode), \(submission.ipAddress),
                    \(metadata)::jsonb, \(envelope.receipt), \(record.latestReceipt),
                    \(ReceiptRows.textArray(transactionIDs))::text[], \(envelope.errorCode), \(envelope.enqueuedAt),
                    \(record.validatedAt))
                ON CONFLICT (id) DO UPDATE SET
                    environment = EXCLUDED.environment, status = EXCLUDED.status, apple_status = EXCLUDED.apple_status,
                    latest_receipt = EXCLUDED.latest_receipt, transaction_ids = EXCLUDED.transaction_ids,
                    error_code = EXCLUDED.error_code, validated_at = EXCLUDED.validated_at, updated_at = now()
                WHERE (receipts.environment, receipts.status, receipts.apple_status, receipts.transaction_ids,
                       receipts.error_code)
                      IS DISTINCT FROM
                      (EXCLUDED.environment, EXCLUDED.status, EXCLUDED.apple_status, EXCLUDED.transaction_ids,
                       EXCLUDED.error_code)
                  -- a late failure never overwrites Apple's verdict
                  AND NOT (receipts.status IN ('valid', 'invalid') AND EXCLUDED.status = 'failed')
                """)
            for purchase in record.purchases {
                _ = try connection.query(
                    """
                    INSERT INTO in_app_purchases (app_id, receipt_id, environment, transaction_id, original_transaction_id,
                        product_id, quantity, purchase_date, original_purchase_date, expires_date, cancellation_date,
                        web_order_line_item_id, is_trial_period, is_in_intro_offer_period, user_identifier)
                    VALUES (\(envelope.appID), \(envelope.id), \(environment), \(purchase.transactionID),
                        \(purchase.originalTransactionID), \(purchase.productID), \(purchase.quantity), \(purchase.purchaseDate),
                        \(purchase.originalPurchaseDate), \(purchase.expiresDate), \(purchase.cancellationDate),
                        \(purchase.webOrderLineItemID), \(purchase.isTrialPeriod), \(purchase.isInIntroOfferPeriod),
                        \(submission.userIdentifier))
                    ON CONFLICT (environment, transaction_id) DO UPDATE SET
                        expires_date = EXCLUDED.expires_date,
                        cancellation_date = EXCLUDED.cancellation_date,
                        user_identifier = COALESCE(in_app_purchases.user_identifier, EXCLUDED.user_identifier),
                        is_conflict = in_app_purchases.is_conflict OR COALESCE(
                            in_app_purchases.user_identifier <> EXCLUDED.user_identifier, false),
                        conflict_user_identifier = CASE
                            WHEN COALESCE(in_app_purchases.user_identifier <> EXCLUDED.user_identifier, false)
                            THEN EXCLUDED.user_identifier ELSE in_app_purchases.conflict_user_identifier END,
                        updated_at = now()
                    WHERE (in_app_purchases.expires_date, in_app_purchases.cancellation_date)
                              IS DISTINCT FROM (EXCLUDED.expires_date, EXCLUDED.cancellation_date)
                       OR (in_app_purchases.user_identifier IS NULL AND EXCLUDED.user_identifier IS NOT NULL)
                       OR COALESCE(in_app_purchases.user_identifier <> EXCLUDED.user_identifier, false)
                          AND in_app_purchases.conflict_user_identifier IS DISTINCT FROM EXCLUDED.user_identifier
                    """)
            }
            for (seq, call) in record.calls.enumerated() {
                _ = try connection.query(
                    """
                    INSERT INTO validation_attempts (receipt_id, attempt, seq, endpoint, http_status, apple_status,
                        is_retryable, latency_ms, error_code)
                    VALUES (\(envelope.id), \(envelope.attempt), \(seq), \(call.endpoint.rawValue), \(call.httpStatus),
                        \(call.appleStatus), \(call.isRetryable), \(call.latencyMs), \(call.errorCode))
                    ON CONFLICT (receipt_id, attempt, seq) DO NOTHING
                    """)
            }
            guard let resource = try ReceiptRows.resource(connection, id: envelope.id, appID: envelope.appID) else {
                throw PostgresStoreError(code: "missing_after_write", message: "receipt row not readable after commit")
            }
            return resource
        }
    }
}

/// Errors of the Postgres adapter that are not Postgres's own.
public struct PostgresStoreError: Error, CustomStringConvertible, Equatable {
    /// A bounded code.
    public var code: String
    /// What went wrong (no receipt data, no secrets).
    public var message: String

    public var description: String { "PostgresStoreError.\(code): \(message)" }
}
