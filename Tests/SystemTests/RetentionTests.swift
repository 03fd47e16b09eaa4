import Foundation
import Hiredis
import Libpq
import Logging
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptScheduler
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Telemetry
import Testing

/// The retention step against real Postgres and Redis, its clock moved forward: what expires per
/// kind, an app's own days over the deployment's, purchases never touched, the batches, the lock
/// that keeps a second replica out, and the dead letters trimmed by age.
@Suite("Retention step", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct RetentionTests {
    let configuration: AppConfiguration
    let connection: PostgresConnection
    /// Follows the deployment's days.
    let plain: AppRecord
    /// Keeps its calls to Apple forever, its notifications a year, its audit lines 100 days.
    let own: AppRecord
    let keys = RedisKeys(prefix: "{rqt-\(UUID().uuidString.prefix(8).lowercased())}")
    static let day: TimeInterval = 86_400

    init() throws {
        (configuration, connection, plain) = try TestSystem.newApp(named: "retention-plain", bundleID: "com.example.retention")
        (_, _, own) = try TestSystem.newApp(named: "retention-own", bundleID: "com.example.retention")
        let admin = AppAdmin(connection: connection)
        try admin.setRetention(appID: own.id, kind: .appleCallAttempts, days: 0)
        try admin.setRetention(appID: own.id, kind: .notifications, days: 365)
        try admin.setRetention(appID: own.id, kind: .auditLog, days: 100)
        try admin.setRetention(appID: own.id, kind: .supersededReceipts, days: 365)
    }

    func redis() throws -> RedisConnection {
        try RedisConnection(configuration: RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort))
    }

    /// A stored validation of `app` with `calls` calls to Apple and one purchase (its ledger).
    func validation(_ app: AppRecord, calls: Int) throws {
        try Self.storeValidation(app, calls: calls, enqueuedAt: Date(), connection: connection)
    }

    /// A validation of `app` enqueued at `enqueuedAt` (its calls are filed under that time), with
    /// `calls` calls to Apple and one purchase, stored through `connection`.
    static func storeValidation(_ app: AppRecord, calls: Int, enqueuedAt: Date, connection: PostgresConnection) throws {
        let envelope = JobEnvelope(
            id: JobID.make(), appID: app.id, enqueuedAt: enqueuedAt, origin: .api,
            payload: .receipt(ReceiptJob(receipt: "MIIretention", style: .unified, bundleID: "com.example.retention", environment: "sandbox")))
        let id = "rt-\(UUID().uuidString)"
        let purchase = InAppPurchase(
            quantity: 1, productID: "p", transactionID: id, originalTransactionID: id, purchaseDate: Date(), originalPurchaseDate: nil,
            expiresDate: nil, cancellationDate: nil, webOrderLineItemID: nil, isTrialPeriod: false, isInIntroOfferPeriod: false)
        let call = AppleCall(endpoint: .sandbox, httpStatus: 200, appleStatus: 0, isRetryable: nil, latencyMs: 2, errorCode: nil)
        let record = ValidationRecord(
            envelope: envelope, status: .valid, environment: "sandbox", appleStatus: 0, purchases: [purchase], latestReceipt: nil,
            calls: Array(repeating: call, count: calls), validatedAt: Date())
        for result in try PostgresReceiptStore(connection: connection).save([record]) {
            if case .failure(let failure) = result { Issue.record("store refused: \(failure)") }
        }
    }

    func seedNotification(_ app: AppRecord) throws {
        _ = try connection.query(
            """
            INSERT INTO notifications (id, app_id, notification_uuid, version, notification_type, signed_at, outcome, payload,
                                       origin, received_at)
            VALUES (\(UUID()), \(app.id), \(UUID().uuidString), 'v2', 'DID_RENEW', now(), 'recorded', '{}', 'apple', now())
            """)
    }

    func seedAudit(_ app: AppRecord) throws {
        _ = try connection.query(
            "INSERT INTO audit_log (actor, action, source, app_id, outcome) VALUES ('test', 'app.retention', 'cli', \(app.id), 'done')")
    }

    /// An event of `app` with one delivery to an endpoint, in `status`.
    func seedEvent(_ app: AppRecord, delivery status: String) throws -> UUID {
        let event = UUID()
        let endpoint = UUID()
        _ = try connection.query(
            """
            WITH e AS (INSERT INTO events (id, app_id, type, subject, sequence, occurred_at, data)
                       VALUES (\(event), \(app.id), 'purchase.refunded', \(event.uuidString), 1, now(), '{}')),
                 w AS (INSERT INTO webhook_endpoints (id, app_id, url, secret_sealed)
                       VALUES (\(endpoint), \(app.id), 'https://example.com/hook', '\\x00'))
            SELECT 1
            """)
        _ = try connection.query(
            """
            INSERT INTO webhook_deliveries (endpoint_id, event_id, app_id, ordering_key, status, delivered_at)
            VALUES (\(endpoint), \(event), \(app.id), 'k', \(status), CASE WHEN \(status) = 'delivered' THEN now() END)
            """)
        return event
    }

    func count(_ table: String, _ app: AppRecord) throws -> Int {
        let where_ = table == "validation_attempts" ? "receipt_id IN (SELECT id FROM receipts WHERE app_id = $1)" : "app_id = $1"
        return try connection.query(PostgresQuery(unsafeSQL: "SELECT count(*) AS n FROM \(table) WHERE \(where_)", binds: [.text(app.id.uuidString)]))
            .rows.first?.int("n") ?? -1
    }

    func sweep(at: Date, batchSize: Int = 2, metrics: PrometheusExporter = PrometheusExporter()) throws -> RetentionSweep.Report {
        let step = RetentionSweep(
            configuration: .init(batchSize: batchSize, batchPause: .zero), make: { fatalError("not run as a service here") },
            now: { at }, metrics: metrics, logger: Logger(label: "retention-test"))
        let rows = PostgresExpiredRows(connection: try PostgresConnection(configuration: configuration.postgres), apps: [plain.id, own.id])
        return try step.sweep(rows: rows, deadLetters: RedisDeadLetterTrim(connection: try redis(), keys: keys))
    }

    /// A sweep that ran: a scheduler of another test in the shared database may hold the
    /// deployment's retention lock for a moment, and a replica that finds it taken skips its run
    /// (the next tick runs), so the test waits for a run of its own as the next tick would.
    func sweepThatRan(at: Date, metrics: PrometheusExporter = PrometheusExporter()) throws -> RetentionSweep.Report {
        var report: RetentionSweep.Report?
        let ran = try eventuallyBlocking {
            report = try sweep(at: at, metrics: metrics)
            return report?.skipped == false
        }
        #expect(ran, "the retention lock was never free")
        return try #require(report)
    }

    @Test("Each kind expires after its days, an app's own days first; purchases and the ledger stay")
    func expiresPerKind() throws {
        for app in [plain, own] {
            try validation(app, calls: 3)
            try seedNotification(app)
            try seedAudit(app)
        }
        let delivered = try seedEvent(plain, delivery: "delivered")
        let open = try seedEvent(plain, delivery: "pending")
        let purchasesBefore = try count("in_app_purchases", plain)
        #expect(purchasesBefore == 1)

        // A day later nothing is due.
        let early = try sweepThatRan(at: Date().addingTimeInterval(Self.day))
        #expect(early.deleted.values.reduce(0, +) == 0)

        // 200 days later: past the calls' 90, the notifications' 180, the events' 30 and the own
        // app's 100 days of audit lines; not past the deployment's 730 days of audit lines.
        let metrics = PrometheusExporter()
        let report = try sweepThatRan(at: Date().addingTimeInterval(200 * Self.day), metrics: metrics)
        #expect(!report.skipped)
        #expect(try count("validation_attempts", plain) == 0)
        #expect(try count("validation_attempts", own) == 3, "0 days: kept forever")
        #expect(try count("notifications", plain) == 0)
        #expect(try count("notifications", own) == 1, "the app keeps them a year")
        #expect(try count("audit_log", plain) == 1)
        #expect(try count("audit_log", own) == 0)
        let events = try connection.query("SELECT id FROM events WHERE app_id = \(plain.id)").rows.compactMap { $0.uuid("id") }
        #expect(events == [open], "an event whose delivery is still open stays; the delivered one went")
        #expect(!events.contains(delivered))
        #expect(try count("in_app_purchases", plain) == purchasesBefore, "purchases are never dropped")
        #expect(try count("receipts", plain) == 1)
        #expect(report.deleted[.appleCallAttempts] == 3, "three rows in batches of two")
        let exposition = String(decoding: metrics.exposition(), as: UTF8.self)
        #expect(exposition.contains(#"receiptq_retention_rows_deleted_total{kind="apple_call_attempts"} 3"#))
        #expect(exposition.contains("receiptq_retention_last_run_timestamp_seconds"))
    }

    @Test("A replica that finds the lock taken skips the run")
    func secondReplicaSkips() throws {
        try validation(plain, calls: 1)
        let holder = try PostgresConnection(configuration: configuration.postgres)
        defer { holder.close() }
        // Another test's scheduler (the shared database) may hold the lock a moment: this replica
        // takes it as soon as that run is over.
        let held = try eventuallyBlocking {
            try holder.query("SELECT pg_try_advisory_lock(hashtext('receiptq.retention')) AS held").rows.first?.bool("held") == true
        }
        #expect(held, "the retention lock was never free")
        let skipped = try sweep(at: Date().addingTimeInterval(100 * Self.day))
        #expect(skipped.skipped)
        #expect(try count("validation_attempts", plain) == 1)
        _ = try holder.query("SELECT pg_advisory_unlock(hashtext('receiptq.retention'))")
        let ran = try sweepThatRan(at: Date().addingTimeInterval(100 * Self.day))
        #expect(!ran.skipped)
        #expect(try count("validation_attempts", plain) == 0)
    }

    @Test("Dead letters are trimmed by the time they died")
    func deadLettersByAge() throws {
        let redis = try redis()
        defer { redis.close() }
        let now = Date()
        let ms = { (date: Date) in String(Int64(date.timeIntervalSince1970 * 1000)) }
        _ = try redis.send(["ZADD", keys.dead, ms(now.addingTimeInterval(-200 * Self.day)), "old-1"])
        _ = try redis.send(["ZADD", keys.dead, ms(now.addingTimeInterval(-190 * Self.day)), "old-2"])
        _ = try redis.send(["ZADD", keys.dead, ms(now.addingTimeInterval(-190 * Self.day)), "old-3"])
        _ = try redis.send(["ZADD", keys.dead, ms(now.addingTimeInterval(-10 * Self.day)), "recent"])
        let report = try sweepThatRan(at: now)
        #expect(report.deleted[.deadLetters] == 3)
        guard case .array(let left) = try redis.send(["ZRANGE", keys.dead, "0", "-1"]) else {
            Issue.record("no dead letters")
            return
        }
        #expect(left.compactMap(\.string) == ["recent"])
        _ = try redis.send(["DEL", keys.dead])
    }

    /// A stored receipt of `app`, `age` seconds older than now, with its text; returns its id.
    func seedReceipt(_ app: AppRecord, user: String?, age: TimeInterval, status: String = "valid") throws -> UUID {
        let id = UUID()
        _ = try connection.query(
            """
            INSERT INTO receipts (id, app_id, status, user_identifier, receipt_data, latest_receipt, created_at)
            VALUES (\(id), \(app.id), \(status), \(user), 'MIItext-\(unescaped: id.uuidString)', 'MIIlatest', now() - make_interval(secs => \(age)))
            """)
        return id
    }

    func text(_ receipt: UUID) throws -> String? {
        let row = try connection.query("SELECT receipt_data || '|' || COALESCE(latest_receipt, '') AS text FROM receipts WHERE id = \(receipt)").rows
            .first
        return row?.string("text")
    }

    /// What may still refer to a superseded receipt.
    enum Referrer {
        case purchase, call, notification
    }

    /// Makes a purchase, a call to Apple or a notification of `app` refer to `receipt`.
    func refer(_ receipt: UUID, of app: AppRecord, from referrer: Referrer) throws {
        let id = "rt-\(UUID().uuidString)"
        switch referrer {
        case .purchase:
            _ = try connection.query(
                """
                INSERT INTO in_app_purchases (app_id, receipt_id, environment, transaction_id, original_transaction_id, product_id, quantity)
                VALUES (\(app.id), \(receipt), 'sandbox', \(id), \(id), 'p', 1)
                """)
        case .call:
            _ = try connection.query(
                """
                INSERT INTO validation_attempts (receipt_id, job_id, attempt, seq, endpoint, latency_ms, created_at)
                VALUES (\(receipt), \(receipt), 1, 1, 'sandbox', 2, now() + interval '20 days')
                """)
        case .notification:
            _ = try connection.query(
                """
                INSERT INTO notifications (id, app_id, notification_uuid, version, notification_type, signed_at, outcome, payload,
                                           origin, received_at, receipt_id)
                VALUES (\(UUID()), \(app.id), \(id), 'v2', 'DID_RENEW', now(), 'recorded', '{}', 'apple', now(), \(receipt))
                """)
        }
    }

    @Test(
        """
        A superseded receipt nothing refers to is deleted; one a purchase, a call or a notification refers to keeps its row, its \
        text emptied; a user's latest, a subscription's, a pending one and an unknown user's keep theirs
        """)
    func supersededReceipts() throws {
        let user = "rt-user-\(UUID().uuidString)"
        let pending = try seedReceipt(plain, user: user, age: 50, status: "pending")
        let purchased = try seedReceipt(plain, user: user, age: 40)
        let called = try seedReceipt(plain, user: user, age: 41)
        let notified = try seedReceipt(plain, user: user, age: 42)
        let older = try seedReceipt(plain, user: user, age: 45)
        let polled = try seedReceipt(plain, user: user, age: 30)
        let latest = try seedReceipt(plain, user: user, age: 20)
        let alone = try seedReceipt(plain, user: "rt-alone-\(UUID().uuidString)", age: 40)
        let anonymous = try seedReceipt(plain, user: nil, age: 40)
        _ = try seedReceipt(plain, user: nil, age: 10)
        let ownOld = try seedReceipt(own, user: user, age: 40)
        _ = try seedReceipt(own, user: user, age: 10)
        try refer(purchased, of: plain, from: .purchase)
        // A call filed 20 days later than the receipt: still kept when the receipt's days are over.
        try refer(called, of: plain, from: .call)
        try refer(notified, of: plain, from: .notification)
        _ = try connection.query(
            """
            INSERT INTO subscriptions (app_id, environment, original_transaction_id, product_id, state, latest_transaction_id,
                                       receipt_id, observed_at)
            VALUES (\(plain.id), 'sandbox', \("rt-\(UUID().uuidString)"), 'p', 'active', 'x', \(polled), now())
            """)
        // Not yet past 90 days: nothing is emptied.
        let early = try sweepThatRan(at: Date().addingTimeInterval(80 * Self.day))
        #expect(early.deleted[.supersededReceipts] == 0)
        #expect(try text(older)?.hasPrefix("MIItext") == true)

        let report = try sweepThatRan(at: Date().addingTimeInterval(100 * Self.day))
        #expect(report.deleted[.supersededReceipts] == 4, "the four superseded, found across pages of two")
        #expect(try text(older) == nil, "nothing referred to it: the row is gone")
        for referred in [purchased, called, notified] {
            #expect(try text(referred) == "|", "the row stays for what refers to it, its text emptied")
        }
        for kept in [pending, polled, latest, alone, anonymous, ownOld] {
            #expect(try text(kept)?.hasPrefix("MIItext") == true)
        }
        // The app keeps its superseded receipts 365 days.
        let later = try sweepThatRan(at: Date().addingTimeInterval(400 * Self.day))
        #expect(later.deleted[.supersededReceipts] == 1)
        #expect(try text(ownOld) == nil)
    }
}
