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
    let rollsUpRevenue: Bool

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
