import Foundation
import Libpq
import ReceiptCore

/// The retention step's Postgres side: deletes expired rows of one kind by primary key, a batch
/// per statement (each its own short transaction, autocommit), an app's `app_retention` row first,
/// the deployment's days otherwise. Purchases, subscriptions and the ledger are never touched:
/// only the tables of ``RetentionKind`` are.
///
/// Replicas: the sweep runs under a session advisory lock (`pg_try_advisory_lock`), so a second
/// scheduler replica skips the run instead of deleting the same rows; a dropped connection frees it.
///
/// Not thread-safe: the retention step's thread owns it.
public final class PostgresExpiredRows: ExpiredRows {
    /// The advisory lock's key: `hashtext('receiptq.retention')`, fixed so every replica agrees.
    static let lockKey = "receiptq.retention"

    private let connection: PostgresConnection
    private let apps: [UUID]?

    /// Creates the adapter on the step's own connection.
    /// - Parameter apps: only these apps' rows (a test sharing its database); nil for all, and
    ///   then the audit lines of no app too.
    public init(connection: PostgresConnection, apps: [UUID]? = nil) {
        self.connection = connection
        self.apps = apps
    }

    public func exclusively(_ body: () throws -> Void) throws -> Bool {
        let held = try connection.query("SELECT pg_try_advisory_lock(hashtext(\(Self.lockKey))) AS held").rows.first?.bool("held") ?? false
        guard held else { return false }
        // Planned with each batch's own bound, never a generic plan that guesses it (this
        // connection is the step's alone).
        try connection.execute("SET plan_cache_mode = force_custom_plan")
        defer { _ = try? connection.query("SELECT pg_advisory_unlock(hashtext(\(Self.lockKey)))") }
        try body()
        return true
    }

    public func deleteBatch(_ kind: RetentionKind, policy: RetentionPolicy, now: Date, limit: Int) throws -> Int {
        guard limit > 0, let table = Self.table(kind) else { return 0 }
        let deployment = policy.days(kind)
        let scope = apps.map { PostgresArray.literal($0.map(\.uuidString)) }
        // What the shortest days of any app allow: nothing is due before it (nothing at all when
        // every app keeps forever). Given as a value, the planner starts from the indexed time
        // and reads only the old part of the table: a run with nothing due reads almost nothing.
        guard
            let bound = try connection.query(
                """
                SELECT \(now)::timestamptz - make_interval(days => min(d.days)) AS bound
                FROM (SELECT days FROM app_retention WHERE kind = \(kind.rawValue) AND days > 0
                        AND (\(scope)::uuid[] IS NULL OR app_id = ANY(\(scope)::uuid[]))
                      UNION ALL SELECT \(deployment)::integer WHERE \(deployment)::integer > 0) d
                """
            ).rows.first?.date("bound")
        else { return 0 }
        // The ids are chosen first (a bounded scan) and deleted by key: the statement locks only
        // those rows, and ends within one batch's time. The scan starts from the table's own
        // time (the app and its days are looked up per row, by key): a join would let the planner
        // start from the apps' receipts, which retention never deletes, and walk them again each
        // batch. NULLIF: 0 days (forever) makes no interval, and the row is not due.
        return try connection.query(
            """
            DELETE FROM \(unescaped: table.name) WHERE \(unescaped: table.key) = ANY(ARRAY(
                SELECT t.\(unescaped: table.key) FROM \(unescaped: table.name) t
                WHERE \(unescaped: table.indexedTime) < \(bound)::timestamptz
                  AND \(unescaped: table.time) < \(now)::timestamptz - make_interval(days => NULLIF(COALESCE(
                        (SELECT o.days FROM app_retention o WHERE o.app_id = \(unescaped: table.app) AND o.kind = \(kind.rawValue)),
                        \(deployment)::integer), 0))
                  AND (\(scope)::uuid[] IS NULL OR \(unescaped: table.app) = ANY(\(scope)::uuid[]))
                  \(unescaped: table.filter)
                LIMIT \(limit)))
            """
        ).affectedRows
    }

    /// Where a kind's rows live: the table, its key, the app of a row (an expression on `t`), its
    /// time, what else must hold.
    struct Table {
        var name: String
        var key: String
        var app: String
        var time: String
        /// An indexed time never later than `time` (a BRIN or B-tree index).
        var indexedTime: String
        var filter = ""
    }

    /// The table of `kind` (nil: not a Postgres kind).
    static func table(_ kind: RetentionKind) -> Table? {
        switch kind {
        case .appleCallAttempts:
            Table(
                name: "validation_attempts", key: "id", app: "(SELECT r.app_id FROM receipts r WHERE r.id = t.receipt_id)",
                time: "t.created_at", indexedTime: "t.created_at")
        case .notifications:
            Table(name: "notifications", key: "id", app: "t.app_id", time: "t.created_at", indexedTime: "t.created_at")
        case .events:
            // Kept while a webhook delivery of it is still open: the deliveries go with the event.
            Table(
                name: "events", key: "id", app: "t.app_id", time: "t.recorded_at", indexedTime: "t.recorded_at",
                filter: """
                    AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                                    WHERE d.event_id = t.id AND d.status IN ('pending', 'queued'))
                    """)
        case .webhookDeliveries:
            Table(
                name: "webhook_deliveries", key: "id", app: "t.app_id", time: "COALESCE(t.delivered_at, t.last_attempt_at, t.created_at)",
                indexedTime: "t.created_at",
                filter: "AND t.status IN ('delivered', 'dead')")
        case .auditLog:
            Table(name: "audit_log", key: "id", app: "t.app_id", time: "t.at", indexedTime: "t.at")
        case .deadLetters:
            nil
        }
    }
}
