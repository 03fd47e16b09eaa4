import Foundation
import Libpq
import ReceiptCore

/// Writes and reads the `subscriptions` table: the worker's upserts, the API's reads.
enum SubscriptionRows {
    /// The subscription rows a record touches (for splitting a batch into conflict-free groups).
    static func keys(of record: ValidationRecord) -> [String] {
        let environment = record.ledgerEnvironment
        var keys = record.subscriptions.map { "\(record.envelope.appID)\u{0}\(environment)\u{0}\($0.state.originalTransactionID)" }
        if let target = record.repollTarget {
            keys.append("\(record.envelope.appID)\u{0}\(record.envelope.payload.environment ?? environment)\u{0}\(target.originalTransactionID)")
        }
        return keys
    }

    /// Records what each re-poll found, then upserts every subscription state of the batch: two
    /// statements, whatever its size. An older observation never replaces a newer one.
    /// - Returns: the rows the upsert wrote, as they are now (an older observation writes none).
    /// - Parameter rollsUpRevenue: whether the upsert adds the changes of active subscriptions, MRR
    ///   and churn to `revenue_daily` (``RevenueRows/subscriptionFlows``).
    @discardableResult
    static func write(
        _ records: [ValidationRecord], rollsUpRevenue: Bool = true, on connection: PostgresConnection
    ) throws -> [(
        appID: UUID?, resource: SubscriptionResource
    )] {
        var outcomes = ColumnBatch([.uuid, .text, .text, .text, .bool, .timestamptz, .timestamptz])
        var rows: [(key: [String], values: [ColumnValue])] = []
        for record in records {
            let environment = record.ledgerEnvironment
            if let target = record.repollTarget {
                outcomes.append(outcome(of: record, target: target))
            }
            for planned in record.subscriptions {
                let state = planned.state
                let key = [record.envelope.appID.canonical, environment, state.originalTransactionID]
                rows.append(
                    (
                        key,
                        [
                            .uuid(record.envelope.appID), .text(environment), .text(state.originalTransactionID),
                            .text(state.productID), .text(state.status.rawValue), .date(state.expiresAt), .date(state.purchasedAt),
                            .date(state.originalPurchaseDate), .bool(state.autoRenewStatus), .text(state.autoRenewProductID),
                            .bool(state.isInBillingRetry), .date(state.gracePeriodExpiresAt), .int(state.expirationIntent),
                            .bool(state.isTrial), .bool(state.isIntro), .text(state.ownershipType), .text(state.latestTransactionID),
                            .date(state.revokedAt), .int(state.cancellationReason), .text(record.userIdentifier),
                            .uuid(record.receiptID), .date(state.observedAt), .date(planned.nextPollAt),
                            // A V2 notification's state: notifications now cover the subscription (RepollSafetyNet).
                            .date(record.notification?.version == .v2 ? record.plannedAt : nil),
                            .int(state.price.map { Int($0.milli) }), .text(state.price?.currency.rawValue),
                        ]
                    ))
            }
        }
        // In key order: concurrent batches then lock the rows they share in the same order, and wait
        // for each other instead of deadlocking.
        var states = ColumnBatch([
            .uuid, .text, .text, .text, .text, .timestamptz, .timestamptz, .timestamptz, .bool, .text, .bool, .timestamptz,
            .int4, .bool, .bool, .text, .text, .timestamptz, .int4, .text, .uuid, .timestamptz, .timestamptz, .timestamptz,
            .int8, .text,
        ])
        for row in rows.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) { states.append(row.values) }
        if !outcomes.isEmpty {
            _ = try connection.query(
                """
                UPDATE subscriptions s SET last_polled_at = u.at, last_poll_error = u.error,
                    next_poll_at = CASE WHEN u.set_next THEN u.next_poll_at ELSE s.next_poll_at END, updated_at = now()
                FROM unnest(\(outcomes[0])::uuid[], \(outcomes[1])::text[], \(outcomes[2])::text[], \(outcomes[3])::text[],
                            \(outcomes[4])::boolean[], \(outcomes[5])::timestamptz[], \(outcomes[6])::timestamptz[])
                  AS u(app_id, environment, original_transaction_id, error, set_next, next_poll_at, at)
                WHERE s.app_id = u.app_id AND s.environment = u.environment
                  AND s.original_transaction_id = u.original_transaction_id
                """)
        }
        guard !states.isEmpty else { return [] }
        let written = try connection.query(
            """
            WITH input AS (
            SELECT * FROM unnest(\(states[0])::uuid[], \(states[1])::text[], \(states[2])::text[], \(states[3])::text[],
                \(states[4])::text[], \(states[5])::timestamptz[], \(states[6])::timestamptz[], \(states[7])::timestamptz[],
                \(states[8])::boolean[], \(states[9])::text[], \(states[10])::boolean[], \(states[11])::timestamptz[],
                \(states[12])::int[], \(states[13])::boolean[], \(states[14])::boolean[], \(states[15])::text[],
                \(states[16])::text[], \(states[17])::timestamptz[], \(states[18])::int[], \(states[19])::text[],
                \(states[20])::uuid[], \(states[21])::timestamptz[], \(states[22])::timestamptz[], \(states[23])::timestamptz[],
                \(states[24])::bigint[], \(states[25])::text[])
              AS u(app_id, environment, original_transaction_id, product_id, state, expires_at,
                purchased_at, original_purchase_date, auto_renew_status, auto_renew_product_id, is_in_billing_retry,
                grace_period_expires_at, expiration_intent, is_trial, is_intro, ownership_type, latest_transaction_id,
                revoked_at, cancellation_reason, user_identifier, receipt_id, observed_at, next_poll_at, notified_at,
                price_milli, currency)
            ), old AS (
                SELECT s.app_id, s.environment, s.original_transaction_id, s.state, s.price_milli, s.currency, s.purchased_at,
                       s.expires_at
                FROM subscriptions s JOIN input i ON s.app_id = i.app_id AND s.environment = i.environment
                    AND s.original_transaction_id = i.original_transaction_id
            ), written AS (
            INSERT INTO subscriptions AS s (app_id, environment, original_transaction_id, product_id, state, expires_at,
                purchased_at, original_purchase_date, auto_renew_status, auto_renew_product_id, is_in_billing_retry,
                grace_period_expires_at, expiration_intent, is_trial, is_intro, ownership_type, latest_transaction_id,
                revoked_at, cancellation_reason, user_identifier, receipt_id, observed_at, next_poll_at, notified_at,
                price_milli, currency)
            SELECT * FROM input
            ON CONFLICT (app_id, environment, original_transaction_id) DO UPDATE SET
                product_id = EXCLUDED.product_id, state = EXCLUDED.state, expires_at = EXCLUDED.expires_at,
                purchased_at = EXCLUDED.purchased_at, original_purchase_date = EXCLUDED.original_purchase_date,
                auto_renew_status = EXCLUDED.auto_renew_status, auto_renew_product_id = EXCLUDED.auto_renew_product_id,
                is_in_billing_retry = EXCLUDED.is_in_billing_retry, grace_period_expires_at = EXCLUDED.grace_period_expires_at,
                expiration_intent = EXCLUDED.expiration_intent, is_trial = EXCLUDED.is_trial, is_intro = EXCLUDED.is_intro,
                ownership_type = EXCLUDED.ownership_type, latest_transaction_id = EXCLUDED.latest_transaction_id,
                revoked_at = EXCLUDED.revoked_at, cancellation_reason = EXCLUDED.cancellation_reason,
                -- The latest transaction's price: a source without one (verifyReceipt) keeps what a
                -- signed transaction said of the same transaction.
                price_milli = CASE WHEN EXCLUDED.price_milli IS NULL AND EXCLUDED.latest_transaction_id = s.latest_transaction_id
                    THEN s.price_milli ELSE EXCLUDED.price_milli END,
                currency = CASE WHEN EXCLUDED.price_milli IS NULL AND EXCLUDED.latest_transaction_id = s.latest_transaction_id
                    THEN s.currency ELSE EXCLUDED.currency END,
                -- The first user to present the subscription keeps it, as in the ledger.
                user_identifier = COALESCE(s.user_identifier, EXCLUDED.user_identifier),
                receipt_id = EXCLUDED.receipt_id, observed_at = EXCLUDED.observed_at, next_poll_at = EXCLUDED.next_poll_at,
                -- A new state plans its own poll: a poll skipped for the old one is moot.
                notified_at = COALESCE(EXCLUDED.notified_at, s.notified_at), skipped_poll_at = NULL,
                updated_at = now()
            -- A newer observation wins; of two made at the same instant (a re-poll answered as the
            -- renewal it raced was stored), the one that knows the later period: equal
            -- timestamps say nothing of which state came first, and a period never ends earlier.
            WHERE s.observed_at < EXCLUDED.observed_at
                OR (s.observed_at = EXCLUDED.observed_at
                    AND COALESCE(EXCLUDED.expires_at, '-infinity') >= COALESCE(s.expires_at, '-infinity'))
            RETURNING \(unescaped: columns)
            )\(unescaped: rollsUpRevenue ? RevenueRows.subscriptionFlows : "")
            SELECT * FROM written s
            """
        ).rows
        return written.compactMap { row in resource(row).map { (row.uuid("app_id"), $0) } }
    }

    /// What a re-poll leaves on its subscription: when it ran, the error if any, and (unless the
    /// upsert that follows plans it) when to poll next.
    private static func outcome(of record: ValidationRecord, target: RepollTarget) -> [ColumnValue] {
        let error: FailureCode?
        let next: Date?
        var setNext = true
        switch record.status {
        case .valid where record.subscriptions.contains { $0.state.originalTransactionID == target.originalTransactionID }:
            (error, next, setNext) = (nil, nil, false)
        case .valid:
            // Apple's answer no longer lists it: nothing to poll for.
            (error, next) = (.subscriptionNotInAnswer, nil)
        case .invalid:
            (error, next) = (record.appleStatus.map { .apple($0) } ?? .unknown, nil)
        case .failed, .pending, .fraud:
            (error, next) = (record.envelope.errorCode ?? .unknown, record.retryPollAt)
        }
        return [
            .uuid(record.envelope.appID), .text(record.envelope.payload.environment ?? record.environment ?? "unknown"),
            .text(target.originalTransactionID), .text(error?.rawValue), .bool(setNext), .date(next), .date(record.plannedAt),
        ]
    }
}

extension SubscriptionRows {
    static let columns = """
        s.app_id, s.environment, s.original_transaction_id, s.product_id, s.state, s.expires_at, s.purchased_at,
        s.original_purchase_date, s.auto_renew_status, s.auto_renew_product_id, s.is_in_billing_retry,
        s.grace_period_expires_at, s.expiration_intent, s.is_trial, s.is_intro, s.ownership_type, s.latest_transaction_id,
        s.revoked_at, s.cancellation_reason, s.user_identifier, s.receipt_id, s.observed_at, s.next_poll_at,
        s.last_polled_at, s.last_poll_error, s.created_at, s.updated_at, s.price_milli, s.currency
        """

    /// A row selected with ``columns``.
    static func resource(_ row: PostgresRow) -> SubscriptionResource? {
        guard let originalTransactionID = row.string("original_transaction_id"), let environment = row.string("environment"),
            let status = row.string("state").flatMap(SubscriptionStatus.init(rawValue:)), let receiptID = row.uuid("receipt_id"),
            let observedAt = row.date("observed_at")
        else { return nil }
        let state = SubscriptionState(
            originalTransactionID: originalTransactionID, productID: row.string("product_id") ?? "", status: status,
            expiresAt: row.date("expires_at"), purchasedAt: row.date("purchased_at"),
            originalPurchaseDate: row.date("original_purchase_date"), autoRenewStatus: row.bool("auto_renew_status"),
            autoRenewProductID: row.string("auto_renew_product_id"), isInBillingRetry: row.bool("is_in_billing_retry") ?? false,
            gracePeriodExpiresAt: row.date("grace_period_expires_at"), expirationIntent: row.int("expiration_intent"),
            isTrial: row.bool("is_trial") ?? false, isIntro: row.bool("is_intro") ?? false, ownershipType: row.string("ownership_type"),
            latestTransactionID: row.string("latest_transaction_id") ?? "", revokedAt: row.date("revoked_at"),
            cancellationReason: row.int("cancellation_reason"), observedAt: observedAt,
            price: Money(milli: row.int("price_milli").map(Int64.init), currency: row.string("currency")))
        return SubscriptionResource(
            state: state, environment: environment, userIdentifier: row.string("user_identifier"), receiptID: receiptID,
            nextPollAt: row.date("next_poll_at"), lastPolledAt: row.date("last_polled_at"), lastPollError: row.string("last_poll_error"),
            createdAt: row.date("created_at") ?? observedAt, updatedAt: row.date("updated_at") ?? observedAt)
    }

    /// One subscription; production first when both environments have it and none is named.
    static func subscription(
        _ connection: PostgresConnection, appID: UUID, originalTransactionID: String, environment: String?
    ) throws -> SubscriptionResource? {
        try connection.query(
            """
            SELECT \(unescaped: columns) FROM subscriptions s
            WHERE s.app_id = \(appID) AND s.original_transaction_id = \(originalTransactionID)
              AND (\(environment)::text IS NULL OR s.environment = \(environment))
            ORDER BY s.environment = 'production' DESC, s.environment
            LIMIT 1
            """
        ).rows.first.flatMap(resource)
    }

    /// A customer's subscriptions (newest expiry first) and other purchases (newest first): the
    /// user's own (by its canonical id when it is an alias) and those shared with it under the
    /// `share` rule; three statements.
    static func entitlements(_ connection: PostgresConnection, appID: UUID, userIdentifier requested: String) throws -> UserEntitlements {
        let userIdentifier = try IdentityRows.canonical(appID: appID, userIdentifier: requested, on: connection)
        let subscriptions = try connection.query(
            """
            SELECT * FROM (
                SELECT \(unescaped: columns) FROM subscriptions s
                WHERE s.app_id = \(appID) AND s.user_identifier = \(userIdentifier)
                UNION
                SELECT \(unescaped: columns) FROM purchase_shares sh
                JOIN in_app_purchases p ON p.environment = sh.environment AND p.transaction_id = sh.transaction_id
                JOIN subscriptions s ON s.app_id = p.app_id AND s.environment = p.environment
                     AND s.original_transaction_id = p.original_transaction_id
                WHERE sh.app_id = \(appID) AND sh.user_identifier = \(userIdentifier)
            ) s
            ORDER BY s.expires_at DESC NULLS LAST, s.original_transaction_id
            LIMIT 1000
            """
        ).rows.compactMap(resource)
        let purchases = try connection.query(
            """
            SELECT * FROM (
                SELECT \(unescaped: PurchaseRows.columns("p"))
                FROM in_app_purchases p
                WHERE p.app_id = \(appID) AND p.user_identifier = \(userIdentifier) AND p.expires_date IS NULL
                  -- Refunded or revoked (a notification, or Apple's answer, says when): no longer owned.
                  -- A prorated refund leaves it owned, with its remaining quantity.
                  AND p.cancellation_date IS NULL
                UNION ALL
                -- Purchases shared with this user (the app's transfer rule `share`).
                SELECT \(unescaped: PurchaseRows.columns("p"))
                FROM purchase_shares sh JOIN in_app_purchases p ON p.environment = sh.environment AND p.transaction_id = sh.transaction_id
                WHERE sh.app_id = \(appID) AND sh.user_identifier = \(userIdentifier) AND p.expires_date IS NULL
                  AND p.cancellation_date IS NULL
            ) p
            ORDER BY purchase_date DESC NULLS LAST, transaction_id
            LIMIT 1000
            """
        ).rows.map { row in InAppPurchaseResource(PurchaseRows.purchase(row), environment: row.string("environment")) }
        return UserEntitlements(userIdentifier: userIdentifier, subscriptions: subscriptions, purchases: purchases)
    }
}
