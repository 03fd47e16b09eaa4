import Foundation
import Libpq
import ReceiptCore

/// The ledger's side of a batch: `in_app_purchases` upserted in one statement, with the transfer
/// rules that decide who owns a row two users present and the refunds that become events.
extension PostgresReceiptStore {
    /// The ledger's rows for the batch, upserted in one statement; returns the new refunds,
    /// conflicts and transfers among them, for the events.
    ///
    /// Who owns a row a second user presents is the app's transfer rule (read only for such a
    /// row): `keep_first` flags the second user (`is_conflict`), `transfer_to_latest` gives the row
    /// to them, `share` keeps the owner and records the second user in `purchase_shares`. Only a
    /// client's own presentation claims: a re-poll or a notification keeps the stored owner.
    /// "First" and "latest" are by presentation (the door's acceptance, `claimed_at`), not by
    /// storage: a claim whose validation Apple held back still comes before one made after it.
    func writePurchases(_ purchases: PurchaseColumns, on connection: PostgresConnection) throws -> [EventRows.PurchaseChange] {
        // The old refund, conflict and owner come along, so that only a new refund, a new
        // conflict or a new owner becomes an event (a replay rewrites nothing and returns nothing).
        let rows = try connection.query(
            """
            WITH raw AS (
                SELECT * FROM unnest(\(purchases.appID)::uuid[], \(purchases.receiptID)::uuid[], \(purchases.environment)::text[],
                    \(purchases.transactionID)::text[], \(purchases.originalTransactionID)::text[], \(purchases.productID)::text[],
                    \(purchases.quantity)::int[], \(purchases.purchaseDate)::timestamptz[],
                    \(purchases.originalPurchaseDate)::timestamptz[], \(purchases.expiresDate)::timestamptz[],
                    \(purchases.cancellationDate)::timestamptz[], \(purchases.webOrderLineItemID)::text[],
                    \(purchases.isTrialPeriod)::boolean[], \(purchases.isInIntroOfferPeriod)::boolean[],
                    \(purchases.userIdentifier)::text[], \(purchases.cancellationReason)::int[], \(purchases.signedAt)::timestamptz[],
                    \(purchases.money(0))::bigint[], \(purchases.money(1))::text[], \(purchases.money(2))::text[],
                    \(purchases.money(3))::int[], \(purchases.money(4))::text[], \(purchases.money(5))::text[],
                    \(purchases.money(6))::text[], \(purchases.money(7))::text[], \(purchases.money(8))::text[],
                    \(purchases.money(9))::text[], \(purchases.money(10))::int[], \(purchases.money(11))::int[],
                    \(purchases.money(12))::bigint[], \(purchases.appAccountToken)::uuid[], \(purchases.claims)::boolean[],
                    \(purchases.claimedAt)::timestamptz[])
                  AS u(app_id, receipt_id, environment, transaction_id, original_transaction_id, product_id, quantity,
                       purchase_date, original_purchase_date, expires_date, cancellation_date, web_order_line_item_id,
                       is_trial_period, is_in_intro_offer_period, user_identifier, cancellation_reason, signed_at,
                       price_milli, currency, storefront, offer_type, offer_identifier, offer_discount_type, offer_period,
                       billing_plan_type, ownership_type, revocation_type, revocation_percentage, refunded_quantity, refunded_milli,
                       app_account_token, claims, claimed_at)
            ), old AS (
                SELECT p.environment, p.transaction_id, p.cancellation_date, p.is_conflict, p.conflict_user_identifier,
                       p.user_identifier, p.revocation_type, p.revocation_percentage, p.price_milli, p.currency, p.refunded_milli
                FROM in_app_purchases p JOIN raw i ON p.environment = i.environment AND p.transaction_id = i.transaction_id
            ), input AS (
                -- A row that does not claim (a re-poll's, a notification's) is written for its stored owner.
                SELECT i.app_id, i.receipt_id, i.environment, i.transaction_id, i.original_transaction_id, i.product_id, i.quantity,
                       i.purchase_date, i.original_purchase_date, i.expires_date, i.cancellation_date, i.web_order_line_item_id,
                       i.is_trial_period, i.is_in_intro_offer_period,
                       CASE WHEN i.claims OR o.user_identifier IS NULL THEN i.user_identifier ELSE o.user_identifier END,
                       i.cancellation_reason, i.signed_at, i.price_milli, i.currency, i.storefront, i.offer_type, i.offer_identifier,
                       i.offer_discount_type, i.offer_period, i.billing_plan_type, i.ownership_type, i.revocation_type,
                       i.revocation_percentage, i.refunded_quantity, i.refunded_milli, i.app_account_token, i.claimed_at
                FROM raw i LEFT JOIN old o ON o.environment = i.environment AND o.transaction_id = i.transaction_id
            ), written AS (
            INSERT INTO in_app_purchases AS in_app_purchases (app_id, receipt_id, environment, transaction_id, original_transaction_id,
                product_id, quantity, purchase_date, original_purchase_date, expires_date, cancellation_date,
                web_order_line_item_id, is_trial_period, is_in_intro_offer_period, user_identifier, cancellation_reason, signed_at,
                price_milli, currency, storefront, offer_type, offer_identifier, offer_discount_type, offer_period,
                billing_plan_type, ownership_type, revocation_type, revocation_percentage, refunded_quantity, refunded_milli,
                app_account_token, claimed_at)
            SELECT * FROM input
            ON CONFLICT (environment, transaction_id) DO UPDATE SET
                expires_date = EXCLUDED.expires_date,
                cancellation_date = EXCLUDED.cancellation_date,
                cancellation_reason = EXCLUDED.cancellation_reason,
                -- What a transaction cost never changes: a source without it (verifyReceipt) keeps
                -- what a signed transaction said.
                price_milli = COALESCE(EXCLUDED.price_milli, in_app_purchases.price_milli),
                currency = CASE WHEN EXCLUDED.price_milli IS NULL THEN in_app_purchases.currency ELSE EXCLUDED.currency END,
                storefront = COALESCE(EXCLUDED.storefront, in_app_purchases.storefront),
                offer_type = COALESCE(EXCLUDED.offer_type, in_app_purchases.offer_type),
                offer_identifier = CASE WHEN EXCLUDED.offer_type IS NULL THEN in_app_purchases.offer_identifier
                    ELSE EXCLUDED.offer_identifier END,
                offer_discount_type = COALESCE(EXCLUDED.offer_discount_type, in_app_purchases.offer_discount_type),
                offer_period = COALESCE(EXCLUDED.offer_period, in_app_purchases.offer_period),
                billing_plan_type = COALESCE(EXCLUDED.billing_plan_type, in_app_purchases.billing_plan_type),
                ownership_type = COALESCE(EXCLUDED.ownership_type, in_app_purchases.ownership_type),
                \(unescaped: Self.revocationUpdates),
                signed_at = COALESCE(EXCLUDED.signed_at, in_app_purchases.signed_at),
                -- Claims are ordered by when they were presented, not stored: the first is the one
                -- the door accepted first, whichever validation Apple let through first.
                user_identifier = CASE
                    WHEN \(unescaped: Self.takesRow) THEN EXCLUDED.user_identifier
                    ELSE COALESCE(in_app_purchases.user_identifier, EXCLUDED.user_identifier) END,
                is_conflict = in_app_purchases.is_conflict
                    OR CASE WHEN \(unescaped: Self.secondUser) THEN \(unescaped: Self.rule) = 'keep_first' ELSE false END,
                -- The user who does not own it: the one presenting it now, or under keep_first the
                -- stored owner an earlier presentation displaces.
                conflict_user_identifier = CASE
                    WHEN \(unescaped: Self.takesRow) AND \(unescaped: Self.rule) = 'keep_first' THEN in_app_purchases.user_identifier
                    WHEN \(unescaped: Self.secondUser) THEN EXCLUDED.user_identifier
                    ELSE in_app_purchases.conflict_user_identifier END,
                claimed_at = CASE
                    WHEN \(unescaped: Self.takesRow) THEN EXCLUDED.claimed_at
                    WHEN \(unescaped: Self.secondUser) THEN in_app_purchases.claimed_at
                    ELSE LEAST(in_app_purchases.claimed_at, EXCLUDED.claimed_at) END,
                app_account_token = COALESCE(in_app_purchases.app_account_token, EXCLUDED.app_account_token),
                updated_at = now()
            -- A notification signed before the one that last wrote the row changes nothing: a late
            -- retry of an old notification must not undo a refund (a validation always writes).
            WHERE (EXCLUDED.signed_at IS NULL OR in_app_purchases.signed_at IS NULL
                   OR in_app_purchases.signed_at <= EXCLUDED.signed_at)
              AND ((in_app_purchases.expires_date, in_app_purchases.cancellation_date, in_app_purchases.cancellation_reason)
                      IS DISTINCT FROM (EXCLUDED.expires_date, EXCLUDED.cancellation_date, EXCLUDED.cancellation_reason)
               -- A signed transaction brings the money or refund share an older row lacks.
               OR (EXCLUDED.price_milli IS NOT NULL AND in_app_purchases.price_milli IS DISTINCT FROM EXCLUDED.price_milli)
               OR (EXCLUDED.ownership_type IS NOT NULL AND in_app_purchases.ownership_type IS DISTINCT FROM EXCLUDED.ownership_type)
               OR (EXCLUDED.offer_type IS NOT NULL AND in_app_purchases.offer_type IS DISTINCT FROM EXCLUDED.offer_type)
               OR (EXCLUDED.revocation_type IS NOT NULL
                   AND (in_app_purchases.revocation_type, in_app_purchases.revocation_percentage)
                       IS DISTINCT FROM (EXCLUDED.revocation_type, EXCLUDED.revocation_percentage))
               OR in_app_purchases.signed_at IS DISTINCT FROM COALESCE(EXCLUDED.signed_at, in_app_purchases.signed_at)
               OR (in_app_purchases.user_identifier IS NULL AND EXCLUDED.user_identifier IS NOT NULL)
               OR (in_app_purchases.app_account_token IS NULL AND EXCLUDED.app_account_token IS NOT NULL)
               OR \(unescaped: Self.secondUser)
                  AND (in_app_purchases.conflict_user_identifier IS DISTINCT FROM EXCLUDED.user_identifier OR \(unescaped: Self.takesRow))
               -- The owner's own earlier presentation, stored late, dates their claim.
               OR NOT \(unescaped: Self.secondUser)
                  AND LEAST(in_app_purchases.claimed_at, EXCLUDED.claimed_at) IS DISTINCT FROM in_app_purchases.claimed_at)
            RETURNING in_app_purchases.*
            ), shared AS (
                -- Under `share`, the second user is entitled too.
                INSERT INTO purchase_shares (app_id, environment, transaction_id, user_identifier)
                SELECT w.app_id, w.environment, w.transaction_id, w.conflict_user_identifier
                FROM written w JOIN apps a ON a.id = w.app_id
                WHERE w.conflict_user_identifier IS NOT NULL AND w.conflict_user_identifier <> w.user_identifier
                  AND a.transfer_rule = 'share'
                ON CONFLICT DO NOTHING
            )\(unescaped: rollsUpRevenue ? RevenueRows.purchaseFlows : "")
            SELECT w.app_id, w.receipt_id, \(unescaped: PurchaseRows.columns("w")), w.user_identifier,
                   w.conflict_user_identifier, w.signed_at, o.user_identifier AS previous_owner, refund.refunded,
                   (w.is_conflict AND w.conflict_user_identifier IS DISTINCT FROM o.conflict_user_identifier) AS conflicted,
                   (o.user_identifier IS NOT NULL AND w.user_identifier IS DISTINCT FROM o.user_identifier) AS transferred
            FROM written w LEFT JOIN old o ON o.environment = w.environment AND o.transaction_id = w.transaction_id
            -- A one-time purchase newly revoked, or given a new share of a prorated refund.
            CROSS JOIN LATERAL (SELECT w.expires_date IS NULL AND (
                (w.cancellation_date IS NOT NULL AND o.cancellation_date IS NULL)
                OR (w.cancellation_date IS NULL AND w.revocation_type = 'REFUND_PRORATED'
                    AND (o.revocation_type, o.revocation_percentage) IS DISTINCT FROM (w.revocation_type, w.revocation_percentage)))
                AS refunded) AS refund
            WHERE refund.refunded OR (w.is_conflict AND w.conflict_user_identifier IS DISTINCT FROM o.conflict_user_identifier)
               OR (o.user_identifier IS NOT NULL AND w.user_identifier IS DISTINCT FROM o.user_identifier)
            """
        ).rows
        return rows.flatMap(Self.purchaseChanges)
    }

    /// The app's transfer rule, in the ledger upsert's `DO UPDATE` (read only for a second user).
    private static let rule = "(SELECT a.transfer_rule FROM apps a WHERE a.id = in_app_purchases.app_id)"

    /// A second user presents a row someone owns (in the ledger upsert's `DO UPDATE`).
    private static let secondUser = "COALESCE(in_app_purchases.user_identifier <> EXCLUDED.user_identifier, false)"

    /// The second user's claim takes the row: under `transfer_to_latest` when it was presented
    /// after the owner's (or either time is unknown: rows from before claims were dated), under
    /// `keep_first` when it was presented before the owner's and only stored after it.
    /// (CASE, not AND: the rule's look-up must not run for the owner's own re-validations.)
    private static let takesRow = """
        CASE WHEN \(secondUser) THEN CASE \(rule)
            WHEN 'transfer_to_latest' THEN NOT COALESCE(EXCLUDED.claimed_at < in_app_purchases.claimed_at, false)
            WHEN 'keep_first' THEN COALESCE(EXCLUDED.claimed_at < in_app_purchases.claimed_at, false)
            ELSE false END ELSE false END
        """

    /// The ledger's refund columns as the newest source states them (a reversal clears them), except
    /// that a source knowing no kind or share (verifyReceipt) of a revocation already stored keeps
    /// the signed transaction's: `SET` clauses of the ledger's upsert.
    private static let revocationUpdates = ["revocation_type", "revocation_percentage", "refunded_quantity", "refunded_milli"]
        .map { column in
            """
            \(column) = CASE WHEN EXCLUDED.revocation_type IS NULL AND EXCLUDED.cancellation_date IS NOT NULL
                AND in_app_purchases.cancellation_date IS NOT NULL THEN in_app_purchases.\(column) ELSE EXCLUDED.\(column) END
            """
        }
        .joined(separator: ",\n")

    /// The events a returned purchase row states: a new refund, a new conflict, or both.
    private static func purchaseChanges(_ row: PostgresRow) -> [EventRows.PurchaseChange] {
        guard let app = row.uuid("app_id"), let environment = row.string("environment"), row.string("transaction_id") != nil
        else { return [] }
        let purchase = PurchaseRows.purchase(row)
        let owner = row.string("user_identifier")
        var changes: [EventRows.PurchaseChange] = []
        if row.bool("refunded") == true {
            changes.append(
                EventRows.PurchaseChange(
                    type: .purchaseRefunded, appID: app, environment: environment, purchase: purchase, owner: owner, conflictUser: nil,
                    receiptID: row.uuid("receipt_id"), occurredAt: purchase.cancellationDate ?? row.date("signed_at") ?? Date()))
        }
        if row.bool("conflicted") == true, let other = row.string("conflict_user_identifier") {
            changes.append(
                EventRows.PurchaseChange(
                    type: .purchaseConflict, appID: app, environment: environment, purchase: purchase, owner: owner, conflictUser: other,
                    receiptID: row.uuid("receipt_id"), occurredAt: Date()))
        }
        if row.bool("transferred") == true, let previous = row.string("previous_owner") {
            changes.append(
                EventRows.PurchaseChange(
                    type: .customerTransferred, appID: app, environment: environment, purchase: purchase, owner: owner,
                    conflictUser: nil, previousOwner: previous, receiptID: row.uuid("receipt_id"), occurredAt: Date()))
        }
        return changes
    }
}

/// The columns of a batch of `in_app_purchases` rows.
struct PurchaseColumns {
    private var columns = ColumnBatch(
        [
            .uuid, .uuid, .text, .text, .text, .text, .int4, .timestamptz, .timestamptz, .timestamptz, .timestamptz, .text, .bool,
            .bool, .text, .int4, .timestamptz,
        ] + InAppPurchase.moneyColumnTypes + [.uuid, .bool, .timestamptz])

    mutating func append(_ record: ValidationRecord) {
        let envelope = record.envelope
        let signedAt = record.notification?.signedDate
        let environment = record.ledgerEnvironment
        // Only a client's own presentation claims the transaction (see writePurchases), as of
        // the door's acceptance: retries and an operator's requeue keep the job's `enqueuedAt`.
        let claims = !record.isRepoll && !record.isNotification
        for purchase in record.purchases {
            let values: [ColumnValue] =
                [
                    .uuid(envelope.appID), .uuid(record.receiptID), .text(environment), .text(purchase.transactionID),
                    .text(purchase.originalTransactionID), .text(purchase.productID), .int(purchase.quantity), .date(purchase.purchaseDate),
                    .date(purchase.originalPurchaseDate), .date(purchase.expiresDate), .date(purchase.cancellationDate),
                    .text(purchase.webOrderLineItemID), .bool(purchase.isTrialPeriod), .bool(purchase.isInIntroOfferPeriod),
                    .text(record.userIdentifier), .int(purchase.cancellationReason), .date(signedAt),
                ] + purchase.moneyColumns + [
                    .uuid(purchase.appAccountToken), .bool(claims), .date(claims ? envelope.enqueuedAt : nil),
                ]
            columns.append(values)
        }
    }

    private func column(_ index: Int) -> PostgresBinaryArray { columns[index] }
    var appID: PostgresBinaryArray { column(0) }
    var receiptID: PostgresBinaryArray { column(1) }
    var environment: PostgresBinaryArray { column(2) }
    var isEmpty: Bool { columns.isEmpty }
    var transactionID: PostgresBinaryArray { column(3) }
    var originalTransactionID: PostgresBinaryArray { column(4) }
    var productID: PostgresBinaryArray { column(5) }
    var quantity: PostgresBinaryArray { column(6) }
    var purchaseDate: PostgresBinaryArray { column(7) }
    var originalPurchaseDate: PostgresBinaryArray { column(8) }
    var expiresDate: PostgresBinaryArray { column(9) }
    var cancellationDate: PostgresBinaryArray { column(10) }
    var webOrderLineItemID: PostgresBinaryArray { column(11) }
    var isTrialPeriod: PostgresBinaryArray { column(12) }
    var isInIntroOfferPeriod: PostgresBinaryArray { column(13) }
    var userIdentifier: PostgresBinaryArray { column(14) }
    var cancellationReason: PostgresBinaryArray { column(15) }
    var signedAt: PostgresBinaryArray { column(16) }
    /// Column `index` of ``InAppPurchase/moneyColumns`` (price_milli is 0).
    func money(_ index: Int) -> PostgresBinaryArray { column(17 + index) }
    var appAccountToken: PostgresBinaryArray { column(17 + InAppPurchase.moneyColumnTypes.count) }
    var claims: PostgresBinaryArray { column(18 + InAppPurchase.moneyColumnTypes.count) }
    var claimedAt: PostgresBinaryArray { column(19 + InAppPurchase.moneyColumnTypes.count) }
}
