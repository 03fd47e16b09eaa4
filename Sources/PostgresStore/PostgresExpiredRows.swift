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
    /// Where this run's scan of superseded receipts has reached (`created_at` as Postgres wrote
    /// it, and the id): receipts that keep their text (a user's latest) are passed once per run,
    /// not once per batch.
    private var supersededCursor: (time: String, id: String)?

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
        supersededCursor = nil
        // Planned with each batch's own bound, never a generic plan that guesses it (this
        // connection is the step's alone).
        try connection.execute("SET plan_cache_mode = force_custom_plan")
        // Never JIT-compiled: a batch runs for milliseconds, but on a large table the estimates of
        // its EXISTS checks pass `jit_above_cost`, and compiling took ~280 ms a statement (the
        // retention soak: Postgres CPU per validation 2.2× at day 30 over day 7 with it on).
        try connection.execute("SET jit = off")
        defer { _ = try? connection.query("SELECT pg_advisory_unlock(hashtext(\(Self.lockKey)))") }
        try body()
        return true
    }

    public func deleteBatch(_ kind: RetentionKind, policy: RetentionPolicy, now: Date, limit: Int) throws -> Int {
        guard limit > 0 else { return 0 }
        if kind == .supersededReceipts { return try emptySupersededTexts(policy: policy, now: now, limit: limit) }
        guard let table = Self.table(kind), let bound = try dueBound(kind, policy: policy, now: now) else { return 0 }
        let deployment = policy.days(kind)
        let scope = self.scope
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
                  AND \(unescaped: table.time) < \(now)::timestamptz - make_interval(secs => \(policy.daySeconds)::double precision * NULLIF(COALESCE(
                        (SELECT o.days FROM app_retention o WHERE o.app_id = \(unescaped: table.app) AND o.kind = \(kind.rawValue)),
                        \(deployment)::integer), 0))
                  AND (\(scope)::uuid[] IS NULL OR \(unescaped: table.app) = ANY(\(scope)::uuid[]))
                  \(unescaped: table.filter)
                LIMIT \(limit)))
            """
        ).affectedRows
    }

    /// Partitions kept ahead of now.
    static let partitionsAhead = 2
    /// The longest a partition's creation or drop waits for its table's lock: what it may stall a
    /// validation's insert queued behind it (it tries again next run). Half the 100 ms a stall may
    /// last: the soak saw an insert wait 91 ms behind a drop that waited 88 ms at a load of 11.
    static let partitionLockWait = "50ms"
    /// `lock_not_available`: a partition's lock not had within ``partitionLockWait``.
    static let lockNotAvailable = "55P03"

    public func createPartitions(policy: RetentionPolicy, now: Date) throws -> Int {
        // A test's adapter shares its database, its clock moved forward: it leaves the partitions alone.
        guard apps == nil else { return 0 }
        var created = 0
        for table in RetentionKind.allCases.compactMap(Self.table) {
            guard let partitionKey = table.partitionKey else { continue }
            do {
                created +=
                    try connection.query(
                        """
                        SELECT receiptq_create_partitions(\(table.name)::regclass, \(table.key), \(partitionKey), \(policy.partitionSeconds)::bigint,
                            \(Self.partitionsAhead)::integer, \(now)::timestamptz, \(Self.partitionLockWait)) AS created
                        """
                    ).rows.first?.int("created") ?? 0
            } catch let error as PostgresError where error.sqlState == Self.lockNotAvailable {
                continue
            }
        }
        return created
    }

    public func dropExpiredPartitions(_ kind: RetentionKind, policy: RetentionPolicy, now: Date) throws -> Int {
        let deployment = policy.days(kind)
        // A test's adapter shares its database: a partition holds other tests' rows. The
        // deployment keeping forever keeps every partition.
        guard apps == nil, deployment > 0, let table = Self.table(kind), table.partitionKey != nil else { return 0 }
        let expired = try connection.query(
            """
            SELECT p.name FROM receiptq_partitions(\(table.name)::regclass) p
            WHERE p.upper_bound <= \(now)::timestamptz - make_interval(secs => \(policy.daySeconds)::double precision * \(deployment)::integer)
            ORDER BY p.upper_bound
            """
        ).rows.compactMap { $0.string("name") }
        guard !expired.isEmpty else { return 0 }
        // The apps that keep this kind longer than the deployment, or forever.
        let longer = try connection.query(
            "SELECT app_id::text AS app FROM app_retention WHERE kind = \(kind.rawValue) AND (days = 0 OR days > \(deployment)::integer)"
        ).rows.compactMap { $0.string("app") }
        var dropped = 0
        for partition in expired {
            if !longer.isEmpty, try keepsRows(partition, of: table, kind: kind, apps: longer, policy: policy, now: now) { continue }
            do {
                try connection.transaction { connection in
                    try connection.execute("SET LOCAL lock_timeout = '\(Self.partitionLockWait)'")
                    try connection.execute("DROP TABLE \(partition)")
                }
                dropped += 1
            } catch let error as PostgresError where error.sqlState == Self.lockNotAvailable {
                continue
            }
        }
        return dropped
    }

    /// Whether one of `apps` (which keep `kind` longer than the deployment) still keeps a row of
    /// `partition` at `now`: then the partition stays, and batched deletes take the others' rows.
    private func keepsRows(
        _ partition: String, of table: Table, kind: RetentionKind, apps: [String], policy: RetentionPolicy, now: Date
    ) throws -> Bool {
        try connection.query(
            """
            SELECT EXISTS (SELECT 1 FROM \(unescaped: partition) t
                WHERE \(unescaped: table.app) = ANY(\(PostgresArray.literal(apps))::uuid[])
                  AND NOT COALESCE(\(unescaped: table.time) < \(now)::timestamptz - make_interval(secs => \(policy.daySeconds)::double precision * NULLIF(
                        (SELECT o.days FROM app_retention o WHERE o.app_id = \(unescaped: table.app) AND o.kind = \(kind.rawValue)),
                        0)), false)) AS kept
            """
        ).rows.first?.bool("kept") ?? true
    }

    /// The apps of a test sharing its database, as a Postgres array literal (nil: every app).
    private var scope: String? { apps.map { PostgresArray.literal($0.map(\.uuidString)) } }

    /// What the shortest days of any app allow for `kind`: nothing is due before it (nil: every
    /// app keeps forever). Given as a value, the planner starts from the indexed time and reads
    /// only the old part of the table: a run with nothing due reads almost nothing.
    private func dueBound(_ kind: RetentionKind, policy: RetentionPolicy, now: Date) throws -> Date? {
        let deployment = policy.days(kind)
        return try connection.query(
            """
            SELECT \(now)::timestamptz - make_interval(secs => \(policy.daySeconds)::double precision * min(d.days)) AS bound
            FROM (SELECT days FROM app_retention WHERE kind = \(kind.rawValue) AND days > 0
                    AND (\(scope)::uuid[] IS NULL OR app_id = ANY(\(scope)::uuid[]))
                  UNION ALL SELECT \(deployment)::integer WHERE \(deployment)::integer > 0) d
            """
        ).rows.first?.date("bound")
    }

    /// Retires up to about `limit` superseded receipts (``RetentionKind/supersededReceipts``):
    /// older than the app's days, with a newer receipt of the same user, and no subscription that
    /// re-polls with them. A receipt nothing else refers to (its purchases were first recorded by
    /// an earlier receipt, its calls to Apple and notifications already dropped) is deleted: a
    /// steady app's devices re-validate every day, and a row per validation kept forever would
    /// grow the table with the traffic. One still referred to keeps its row, status and
    /// purchases, and its texts are emptied.
    ///
    /// A user's latest receipt keeps its text, so a scan from the oldest would meet the same kept
    /// receipts at every batch: the scan walks the receipts that still hold a text in pages, in
    /// `(created_at, id)` order from where this run's last page ended, each page one short
    /// statement, until `limit` texts are emptied or nothing older than the bound is left.
    private func emptySupersededTexts(policy: RetentionPolicy, now: Date, limit: Int) throws -> Int {
        guard let bound = try dueBound(.supersededReceipts, policy: policy, now: now) else { return 0 }
        let deployment = policy.days(.supersededReceipts)
        let kind = RetentionKind.supersededReceipts.rawValue
        var emptied = 0
        while emptied < limit {
            let cursor = supersededCursor
            let page = try connection.query(
                """
                WITH page AS (
                    SELECT t.id, t.created_at FROM receipts t
                    WHERE (octet_length(t.receipt_data) > 0 OR t.latest_receipt IS NOT NULL)
                      AND t.created_at < \(bound)::timestamptz
                      AND (\(cursor?.time)::timestamptz IS NULL OR (t.created_at, t.id) > (\(cursor?.time)::timestamptz, \(cursor?.id)::uuid))
                      AND (\(scope)::uuid[] IS NULL OR t.app_id = ANY(\(scope)::uuid[]))
                    ORDER BY t.created_at, t.id LIMIT \(limit)),
                due AS (
                    SELECT t.id, (EXISTS (SELECT 1 FROM in_app_purchases p WHERE p.receipt_id = t.id)
                                  OR EXISTS (SELECT 1 FROM validation_attempts a WHERE a.receipt_id = t.id)
                                  OR EXISTS (SELECT 1 FROM notifications x WHERE x.receipt_id = t.id)) AS referred
                    FROM receipts t JOIN page ON t.id = page.id
                    WHERE t.status <> 'pending' AND t.user_identifier IS NOT NULL
                      AND t.created_at < \(now)::timestamptz - make_interval(secs => \(policy.daySeconds)::double precision * NULLIF(COALESCE(
                            (SELECT o.days FROM app_retention o WHERE o.app_id = t.app_id AND o.kind = \(kind)),
                            \(deployment)::integer), 0))
                      AND NOT EXISTS (SELECT 1 FROM subscriptions s WHERE s.receipt_id = t.id)
                      AND EXISTS (SELECT 1 FROM receipts n WHERE n.app_id = t.app_id
                                    AND n.user_identifier = t.user_identifier AND n.created_at > t.created_at)),
                deleted AS (
                    DELETE FROM receipts t USING due WHERE t.id = due.id AND NOT due.referred RETURNING t.id),
                emptied AS (
                    UPDATE receipts t SET receipt_data = '', latest_receipt = NULL, updated_at = now()
                    FROM due WHERE t.id = due.id AND due.referred
                    RETURNING t.id)
                SELECT (SELECT count(*) FROM page) AS scanned, (SELECT count(*) FROM emptied) + (SELECT count(*) FROM deleted) AS emptied,
                       (SELECT created_at::text FROM page ORDER BY created_at DESC, id DESC LIMIT 1) AS last_time,
                       (SELECT id::text FROM page ORDER BY created_at DESC, id DESC LIMIT 1) AS last_id
                """
            ).rows.first
            let scanned = page?.int("scanned") ?? 0
            emptied += page?.int("emptied") ?? 0
            if let time = page?.string("last_time"), let id = page?.string("last_id") { supersededCursor = (time, id) }
            if scanned < limit { break }
        }
        return emptied
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
        /// The column the table is partitioned by, the one `time` reads (migrations 0032, 0033):
        /// retention drops its expired partitions whole. Nil: not partitioned.
        var partitionKey: String?
    }

    /// The table of `kind` (nil: not a Postgres kind).
    static func table(_ kind: RetentionKind) -> Table? {
        switch kind {
        case .appleCallAttempts:
            Table(
                name: "validation_attempts", key: "id", app: "(SELECT r.app_id FROM receipts r WHERE r.id = t.receipt_id)",
                time: "t.created_at", indexedTime: "t.created_at", partitionKey: "created_at")
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
            Table(name: "audit_log", key: "id", app: "t.app_id", time: "t.at", indexedTime: "t.at", partitionKey: "at")
        case .deadLetters, .supersededReceipts:
            // Not deleted rows: the dead letters are in Redis, a superseded receipt keeps its row.
            nil
        }
    }
}
