import Foundation
import Libpq
import OpenSSL
import ReceiptCore

/// The worker's `ReceiptStore` on one Postgres connection: a batch of results is one transaction
/// of a few set-based statements (group commit), whatever its size.
///
/// Not thread-safe: a worker thread owns it and calls it from that thread.
public final class PostgresReceiptStore: ReceiptStore {
    let connection: PostgresConnection
    let secrets: SecretBox?
    private var apps: [UUID: (record: AppRecord, loadedAt: Date)] = [:]
    private let appCacheTTL: TimeInterval = 30
    var endpoints: [UUID: (record: WebhookEndpointRecord?, loadedAt: Date)] = [:]
    let endpointCacheTTL: TimeInterval = 5
    private let writesEvents: Bool
    /// Whether the batch's transaction adds its changes to the revenue rollup (`REVENUE_ROLLUP`).
    private let rollsUpRevenue: Bool

    /// Creates a store on `connection`.
    /// - Parameters:
    ///   - secrets: opens the apps' sealed In-App Purchase keys (nil: none is opened, so no app
    ///     can use the Server API).
    ///   - writesEvents: false only to measure what the outbox costs (`scripts/bench outbox`): the
    ///     store then writes no events (no webhook is ever sent) and takes no subscription locks,
    ///     which also order concurrent writers of one subscription for the notifications' staleness
    ///     check — never for a running system.
    ///   - rollsUpRevenue: whether each batch adds what it changed to the revenue figures
    ///     (`revenue_daily`, in the same transaction); false (`REVENUE_ROLLUP=off`) leaves them
    ///     behind, for a deployment that does not want them or a bench measuring their cost.
    public init(connection: PostgresConnection, secrets: SecretBox? = nil, writesEvents: Bool = true, rollsUpRevenue: Bool = true) {
        self.connection = connection
        self.secrets = secrets
        self.writesEvents = writesEvents
        self.rollsUpRevenue = rollsUpRevenue
    }

    public func app(id: UUID) throws -> AppRecord? {
        if let cached = apps[id], Date().timeIntervalSince(cached.loadedAt) < appCacheTTL { return cached.record }
        let rows = try connection.query(
            "SELECT \(unescaped: AppAdmin.appColumns) \(unescaped: AppAdmin.appTables) WHERE apps.id = \(id)"
        ).rows
        guard let record = rows.first.flatMap({ AppAdmin.appRecord($0, secrets: secrets) }) else { return nil }
        apps[id] = (record, Date())
        return record
    }

    public func historyCursors(_ keys: Set<HistoryKey>) throws -> [HistoryKey: HistoryCursor] {
        guard !keys.isEmpty else { return [:] }
        do {
            return try HistoryCursorRows.read(keys, on: connection)
        } catch let error as PostgresError {
            throw Self.failure(error)
        }
    }

    public func save(_ records: [ValidationRecord]) throws -> [Result<ReceiptResource?, StoreFailure>] {
        guard !records.isEmpty else { return [] }
        do {
            let resources = try connection.transaction { connection -> [UUID: ReceiptResource] in
                if writesEvents { try EventRows.lock(records, on: connection) }
                var changes = EventRows.Changes()
                for group in Self.conflictFreeGroups(records) {
                    let prepared = try IdentityRows.resolve(NotificationRows.prepare(group, on: connection), on: connection)
                    changes.merge(try write(prepared, on: connection))
                }
                try NotificationActivityRows.touch(records, on: connection)
                let resources = try ReceiptRows.resources(
                    connection, ids: records.filter { !$0.isRepoll && !$0.isNotification }.map(\.envelope.id))
                if writesEvents {
                    // An import that did not ask for events records its changes without them.
                    let quiet = Set(records.filter(\.envelope.isQuiet).map(\.envelope.id))
                    if !quiet.isEmpty { changes.drop(receipts: quiet) }
                    try EventRows.insert(EventRows.events(changes, resources: resources, now: Date()), on: connection)
                }
                return resources
            }
            return records.map { record -> Result<ReceiptResource?, StoreFailure> in
                // A re-poll or a notification has no receipt of its own to show: nobody waits for it.
                if record.isRepoll || record.isNotification { return .success(nil) }
                return resources[record.envelope.id].map { .success($0) }
                    ?? .failure(StoreFailure(code: .missingAfterWrite, message: "receipt row not readable after commit"))
            }
        } catch let error as PostgresError where !Self.isConnectionFailure(error) {
            // The database refused something in the batch (a constraint, a value): find which record
            // by storing each alone, so one bad record does not hold back the others.
            guard records.count > 1 else { return [.failure(Self.failure(error))] }
            return try records.map { record in try save([record])[0] }
        }
    }

    /// Splits a batch so that no statement touches the same row twice: Postgres refuses an
    /// `INSERT … ON CONFLICT DO UPDATE` that would (a replayed job queued twice, two receipts of
    /// one batch sharing a transaction). Almost always one group.
    static func conflictFreeGroups(_ records: [ValidationRecord]) -> [[ValidationRecord]] {
        var groups: [(records: [ValidationRecord], keys: Set<String>)] = []
        for record in records {
            let environment = record.ledgerEnvironment
            let keys =
                ["r:\(record.envelope.id)"] + record.purchases.map { "p:\(environment)\u{0}\($0.transactionID)" }
                + SubscriptionRows.keys(of: record).map { "s:\($0)" }
                // The same notification twice (Apple's retry queued again): one after the other,
                // so the second finds the first stored.
                + (record.notification.map { ["n:\(record.envelope.appID)\u{0}\($0.uuid)"] } ?? [])
            if let index = groups.firstIndex(where: { $0.keys.isDisjoint(with: keys) }) {
                groups[index].records.append(record)
                groups[index].keys.formUnion(keys)
            } else {
                groups.append(([record], Set(keys)))
            }
        }
        return groups.map(\.records)
    }

    private static func isConnectionFailure(_ error: PostgresError) -> Bool {
        [.connectionFailed, .connectionLost, .closed].contains(error.code)
    }

    private static func failure(_ error: PostgresError) -> StoreFailure {
        // The event sequence's unique index is a net for a writer that ran without its subject's
        // lock: a retry takes the lock and numbers after the winner, so it is not the record's fault.
        let sequenceRace = error.constraint == "events_subject_sequence_key"
        return StoreFailure(
            code: error.sqlState.map { .sqlState($0) } ?? .driver("\(error.code)"), message: "Postgres refused the record: \(error.message)",
            isPermanent: error.isDataError && !sequenceRace)
    }

    /// A few statements for the whole group: receipts, the ledger, the audit trail, the
    /// subscriptions; returns what changed, for the events.
    private func write(_ records: [ValidationRecord], on connection: PostgresConnection) throws -> EventRows.Changes {
        var receipts = ReceiptColumns()
        var purchases = PurchaseColumns()
        var attempts = AttemptColumns()
        var changes = EventRows.Changes()
        for record in records {
            if record.writesReceiptRow { receipts.append(record) }
            purchases.append(record)
            attempts.append(record)
        }
        let before = writesEvents ? try EventRows.subscriptionsBefore(records, on: connection) : [:]
        if !receipts.isEmpty {
            let changed = try writeReceipts(receipts, on: connection)
            // A verdict is news only for a receipt the backend posted (not a notification's own row).
            for record in records where changed.contains(record.envelope.id) && !record.isNotification && !record.isRepoll {
                changes.verdicts.append((record.envelope.id, record.envelope.appID, record.validatedAt))
            }
        }
        try writeLatestReceipts(of: records.filter(\.isRepoll), on: connection)
        try switchToServerAPI(records, on: connection)
        if !purchases.isEmpty { changes.purchases = try writePurchases(purchases, on: connection) }
        if writesEvents { changes.consents = try NotificationRows.consents(records, on: connection) }
        if !attempts.isEmpty { try writeAttempts(attempts, on: connection) }
        try HistoryCursorRows.write(records, on: connection)
        if writesEvents { changes.keepTransactions(of: records) }
        for after in try SubscriptionRows.write(records, rollsUpRevenue: rollsUpRevenue, on: connection) {
            guard let app = after.appID else { continue }
            let key = EventRows.key(app, after.resource.environment, after.resource.state.originalTransactionID)
            changes.subscriptions.append((app, EventRows.stateBefore(before[key], after: after.resource), after.resource))
        }
        // A transferred transaction takes its subscription along.
        try IdentityRows.moveSubscriptions(changes.purchases.filter { $0.type == .customerTransferred }, on: connection)
        return changes
    }

    /// Marks the apps whose `auto` backend this batch's results moved to the App Store Server API.
    private func switchToServerAPI(_ records: [ValidationRecord], on connection: PostgresConnection) throws {
        let switching = Set(records.filter(\.switchesApp).map(\.envelope.appID.uuidString))
        guard !switching.isEmpty else { return }
        // With the result that first came from the Server API: the switch and its evidence
        // commit together. An operator's choice since then (not `auto` any more) stands.
        _ = try connection.query(
            """
            UPDATE apps SET switched_to_server_api_at = now(), updated_at = now()
            WHERE id = ANY(\(PostgresArray.literal(switching.sorted()))::uuid[])
              AND validation_backend = 'auto' AND switched_to_server_api_at IS NULL
            """)
        // The app cache would keep routing the app's other jobs the old way for a while.
        for id in switching { UUID(uuidString: id).map { apps[$0] = nil } }
    }

    /// The ledger's rows for the batch, upserted in one statement; returns the new refunds,
    /// conflicts and transfers among them, for the events.
    ///
    /// Who owns a row a second user presents is the app's transfer rule (read only for such a
    /// row): `keep_first` flags the second user (`is_conflict`), `transfer_to_latest` gives the row
    /// to them, `share` keeps the owner and records the second user in `purchase_shares`. Only a
    /// client's own presentation claims: a re-poll or a notification keeps the stored owner.
    /// "First" and "latest" are by presentation (the door's acceptance, `claimed_at`), not by
    /// storage: a claim whose validation Apple held back still comes before one made after it.
    private func writePurchases(_ purchases: PurchaseColumns, on connection: PostgresConnection) throws -> [EventRows.PurchaseChange] {
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

    /// The batch's calls to Apple, for the audit trail (a replayed call is not written twice).
    private func writeAttempts(_ attempts: AttemptColumns, on connection: PostgresConnection) throws {
        _ = try connection.query(
            """
            INSERT INTO validation_attempts (receipt_id, job_id, attempt, seq, endpoint, http_status, apple_status,
                is_retryable, latency_ms, error_code, created_at)
            SELECT * FROM unnest(\(attempts.receiptID)::uuid[], \(attempts.jobID)::uuid[], \(attempts.attempt)::int[], \(attempts.seq)::int[],
                \(attempts.endpoint)::text[], \(attempts.httpStatus)::int[], \(attempts.appleStatus)::int[],
                \(attempts.isRetryable)::boolean[], \(attempts.latencyMs)::int[], \(attempts.errorCode)::text[],
                \(attempts.filedAt)::timestamptz[])
            ON CONFLICT (job_id, attempt, seq, created_at) DO NOTHING
            """)
    }

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

    /// A re-poll's answer carries Apple's newest receipt: the next re-poll sends that one.
    private func writeLatestReceipts(of repolls: [ValidationRecord], on connection: PostgresConnection) throws {
        let updates = repolls.filter { $0.latestReceipt != nil && $0.latestReceipt != $0.envelope.payload.carriedText }
        guard !updates.isEmpty else { return }
        _ = try connection.query(
            """
            UPDATE receipts r SET latest_receipt = u.latest_receipt, updated_at = now()
            FROM unnest(\(PostgresArray.literal(updates.map(\.receiptID.uuidString)))::uuid[],
                        \(PostgresArray.literal(updates.map(\.latestReceipt)))::text[]) AS u(id, latest_receipt)
            WHERE r.id = u.id AND r.latest_receipt IS DISTINCT FROM u.latest_receipt AND r.receipt_data <> u.latest_receipt
            """)
    }

    /// Returns the receipts whose status is new: inserted, or changed (Apple's verdict after a
    /// failure an operator retried). A replay returns nothing.
    private func writeReceipts(_ receipts: ReceiptColumns, on connection: PostgresConnection) throws -> Set<UUID> {
        // Idempotent: a replay writes the same values, and the WHERE makes it a no-op (updated_at included).
        let rows = try connection.query(
            """
            WITH old AS (
                SELECT id, status FROM receipts WHERE id = ANY(\(receipts.id)::uuid[]) FOR UPDATE
            ), written AS (
            INSERT INTO receipts (id, app_id, style, bundle_id, environment, status, apple_status, user_identifier,
                identifier_for_vendor, country_code, ip_address, metadata, receipt_data, latest_receipt,
                transaction_ids, error_code, created_at, validated_at, is_fraud, fraud_reason, source, transaction_id, validated_by)
            SELECT u.id, u.app_id, u.style, u.bundle_id, u.environment, u.status, u.apple_status, u.user_identifier,
                u.identifier_for_vendor, u.country_code, u.ip_address, u.metadata::jsonb, u.receipt_data, u.latest_receipt,
                ARRAY(SELECT jsonb_array_elements_text(u.transaction_ids::jsonb)), u.error_code, u.created_at, u.validated_at,
                u.is_fraud, u.fraud_reason, u.source, u.transaction_id, u.validated_by
            FROM unnest(\(receipts.id)::uuid[], \(receipts.appID)::uuid[], \(receipts.style)::text[], \(receipts.bundleID)::text[],
                \(receipts.environment)::text[], \(receipts.status)::text[], \(receipts.appleStatus)::int[],
                \(receipts.userIdentifier)::text[], \(receipts.identifierForVendor)::text[], \(receipts.countryCode)::text[],
                \(receipts.ipAddress)::text[], \(receipts.metadata)::text[], \(receipts.receiptData)::text[],
                \(receipts.latestReceipt)::text[], \(receipts.transactionIDs)::text[], \(receipts.errorCode)::text[],
                \(receipts.createdAt)::timestamptz[], \(receipts.validatedAt)::timestamptz[], \(receipts.isFraud)::boolean[],
                \(receipts.fraudReason)::text[], \(receipts.source)::text[], \(receipts.transactionID)::text[],
                \(receipts.validatedBy)::text[])
              AS u(id, app_id, style, bundle_id, environment, status, apple_status, user_identifier, identifier_for_vendor,
                   country_code, ip_address, metadata, receipt_data, latest_receipt, transaction_ids, error_code,
                   created_at, validated_at, is_fraud, fraud_reason, source, transaction_id, validated_by)
            ON CONFLICT (id) DO UPDATE SET
                environment = EXCLUDED.environment, status = EXCLUDED.status, apple_status = EXCLUDED.apple_status,
                latest_receipt = EXCLUDED.latest_receipt, transaction_ids = EXCLUDED.transaction_ids,
                error_code = EXCLUDED.error_code, validated_at = EXCLUDED.validated_at,
                validated_by = COALESCE(EXCLUDED.validated_by, receipts.validated_by), updated_at = now()
            WHERE (receipts.environment, receipts.status, receipts.apple_status, receipts.transaction_ids,
                   receipts.error_code, receipts.validated_by)
                  IS DISTINCT FROM
                  (EXCLUDED.environment, EXCLUDED.status, EXCLUDED.apple_status, EXCLUDED.transaction_ids,
                   EXCLUDED.error_code, COALESCE(EXCLUDED.validated_by, receipts.validated_by))
              -- a late failure never overwrites Apple's verdict
              AND NOT (receipts.status IN ('valid', 'invalid') AND EXCLUDED.status = 'failed')
            RETURNING receipts.id, receipts.status
            )
            SELECT w.id FROM written w LEFT JOIN old o ON o.id = w.id WHERE o.status IS DISTINCT FROM w.status
            """
        ).rows
        return Set(rows.compactMap { $0.uuid("id") })
    }
}

/// The columns of a batch of `receipts` rows, one binary array each.
private struct ReceiptColumns {
    private var columns = ColumnBatch([
        .uuid, .uuid, .text, .text, .text, .text, .int4, .text, .text, .text, .text, .text, .text, .text, .text, .text,
        .timestamptz, .timestamptz, .bool, .text, .text, .text, .text,
    ])
    var isEmpty: Bool { columns.isEmpty }

    mutating func append(_ record: ValidationRecord) {
        let envelope = record.envelope
        let purchase = envelope.payload.purchase
        var submission = purchase?.submission ?? Submission()
        // The user as posted (an alias stays an alias here); a notification's own row, its owner's.
        submission.userIdentifier = submission.userIdentifier ?? record.userIdentifier
        // A notification's own row (what it carried, for its subscription's re-polls) says so.
        let source: JobSource = purchase?.source ?? (record.isNotification ? .notification : .receipt)
        let receipt = record.envelope.payload.carriedText
        let metadata = submission.metadata.flatMap { try? JSONEncoder().encode($0) }.map { String(decoding: $0, as: UTF8.self) }
        let transactionIDs = (try? JSONEncoder().encode(record.purchases.map(\.transactionID))).map { String(decoding: $0, as: UTF8.self) }
        let values: [ColumnValue] = [
            .uuid(envelope.id), .uuid(envelope.appID), .text(purchase?.style?.rawValue), .text(envelope.payload.bundleID),
            // Unknown only for a transaction id no environment knows: null, not a made-up name.
            .text(record.environment ?? envelope.payload.environment), .text(record.status.rawValue), .int(record.appleStatus),
            .text(submission.userIdentifier), .text(submission.identifierForVendor), .text(submission.countryCode),
            .text(submission.ipAddress), .text(metadata), .text(receipt),
            // Apple echoes the receipt it was sent as latest_receipt: keep a copy only when it differs.
            .text(record.latestReceipt == receipt ? nil : record.latestReceipt),
            .text(transactionIDs ?? "[]"), .text(record.storedErrorCode), .date(envelope.enqueuedAt), .date(record.validatedAt),
            .bool(record.status == .fraud), .text(record.status == .fraud ? purchase?.fraudReason : nil), .text(source.rawValue),
            // The id a StoreKit 2 submission names; a receipt's is its own business (in its purchases).
            .text(source == .receipt ? nil : purchase?.transactionID), .text(record.validatedBy?.rawValue),
        ]
        columns.append(values)
    }

    private func column(_ index: Int) -> PostgresBinaryArray { columns[index] }
    var id: PostgresBinaryArray { column(0) }
    var appID: PostgresBinaryArray { column(1) }
    var style: PostgresBinaryArray { column(2) }
    var bundleID: PostgresBinaryArray { column(3) }
    var environment: PostgresBinaryArray { column(4) }
    var status: PostgresBinaryArray { column(5) }
    var appleStatus: PostgresBinaryArray { column(6) }
    var userIdentifier: PostgresBinaryArray { column(7) }
    var identifierForVendor: PostgresBinaryArray { column(8) }
    var countryCode: PostgresBinaryArray { column(9) }
    var ipAddress: PostgresBinaryArray { column(10) }
    var metadata: PostgresBinaryArray { column(11) }
    var receiptData: PostgresBinaryArray { column(12) }
    var latestReceipt: PostgresBinaryArray { column(13) }
    var transactionIDs: PostgresBinaryArray { column(14) }
    var errorCode: PostgresBinaryArray { column(15) }
    var createdAt: PostgresBinaryArray { column(16) }
    var validatedAt: PostgresBinaryArray { column(17) }
    var isFraud: PostgresBinaryArray { column(18) }
    var fraudReason: PostgresBinaryArray { column(19) }
    var source: PostgresBinaryArray { column(20) }
    var transactionID: PostgresBinaryArray { column(21) }
    var validatedBy: PostgresBinaryArray { column(22) }
}

/// The columns of a batch of `in_app_purchases` rows.
private struct PurchaseColumns {
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

/// The columns of a batch of `validation_attempts` rows: one per call to Apple.
private struct AttemptColumns {
    private var columns = ColumnBatch([.uuid, .int4, .int4, .text, .int4, .int4, .bool, .int4, .text, .uuid, .timestamptz])

    mutating func append(_ record: ValidationRecord) {
        for (seq, call) in record.calls.enumerated() {
            let values: [ColumnValue] = [
                .uuid(record.receiptID), .int(record.envelope.attempt), .int(seq), .text(call.endpoint.rawValue),
                .int(call.httpStatus), .int(call.appleStatus), .bool(call.isRetryable), .int(call.latencyMs), .text(call.errorCode?.rawValue),
                .uuid(record.envelope.id), .date(record.callsFiledAt),
            ]
            columns.append(values)
        }
    }

    private func column(_ index: Int) -> PostgresBinaryArray { columns[index] }
    var isEmpty: Bool { columns.isEmpty }
    var receiptID: PostgresBinaryArray { column(0) }
    var attempt: PostgresBinaryArray { column(1) }
    var seq: PostgresBinaryArray { column(2) }
    var endpoint: PostgresBinaryArray { column(3) }
    var httpStatus: PostgresBinaryArray { column(4) }
    var appleStatus: PostgresBinaryArray { column(5) }
    var isRetryable: PostgresBinaryArray { column(6) }
    var latencyMs: PostgresBinaryArray { column(7) }
    var errorCode: PostgresBinaryArray { column(8) }
    var jobID: PostgresBinaryArray { column(9) }
    var filedAt: PostgresBinaryArray { column(10) }
}
