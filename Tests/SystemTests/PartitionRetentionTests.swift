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

/// Retention over the time-partitioned tables (migrations 0032, 0033), each test in a database
/// of its own: the step drops whole partitions, which in the shared test database hold every
/// test's rows. Partitions created ahead, a whole partition dropped (the legacy one too), an app
/// that keeps longer keeping its partition while batched deletes take the others' rows, a row with
/// no partition yet taken by the DEFAULT one and moved out when its range is created, and a
/// replayed job's calls written once.
@Suite("Partitioned retention", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
final class PartitionRetentionTests {
    let admin: PostgresConnection
    let database = "receiptq_partitions_\(UUID().uuidString.prefix(8).lowercased())"
    let connection: PostgresConnection
    /// Follows the deployment's days (90 for calls to Apple).
    let plain: AppRecord
    /// Keeps its calls to Apple forever.
    let own: AppRecord
    let keys = RedisKeys(prefix: "{rqp-\(UUID().uuidString.prefix(8).lowercased())}")

    init() throws {
        let shared = try TestSystem.migratedDatabase()
        admin = try PostgresConnection(configuration: shared.postgres)
        try admin.execute("CREATE DATABASE \(database)")
        var environment = [
            "POSTGRES_HOSTNAME": TestEnvironment.postgresHost, "POSTGRES_PORT": String(TestEnvironment.postgresPort),
            "POSTGRES_USER": TestEnvironment.postgresUser, "POSTGRES_DB": database,
            "REDIS_HOSTNAME": TestEnvironment.redisHost, "REDIS_PORT": String(TestEnvironment.redisPort),
        ]
        if let password = TestEnvironment.postgresPassword { environment["POSTGRES_PASSWORD"] = password }
        let configuration = try AppConfiguration(environment: environment)
        try ReceiptQueueApp.migrate(configuration)
        connection = try PostgresConnection(configuration: configuration.postgres)
        let apps = AppAdmin(connection: connection)
        (plain, _) = try apps.addApp(name: "partitions-plain", bundleID: "com.example.retention", sharedSecret: "s")
        (own, _) = try apps.addApp(name: "partitions-own", bundleID: "com.example.retention", sharedSecret: "s")
        try apps.setRetention(appID: own.id, kind: .appleCallAttempts, days: 0)
    }

    deinit {
        connection.close()
        try? admin.execute("DROP DATABASE IF EXISTS \(database) WITH (FORCE)")
        admin.close()
    }

    /// One run of the step over the whole database (no app scope: partitions are dropped).
    func sweep(at: Date, policy: RetentionPolicy = RetentionPolicy()) throws -> RetentionSweep.Report {
        let step = RetentionSweep(
            configuration: .init(policy: policy, batchSize: 2, batchPause: .zero), make: { fatalError("not run as a service here") },
            now: { at }, metrics: PrometheusExporter(), logger: Logger(label: "partition-test"))
        let redis = try RedisConnection(configuration: RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort))
        return try step.sweep(rows: PostgresExpiredRows(connection: connection), deadLetters: RedisDeadLetterTrim(connection: redis, keys: keys))
    }

    /// `table`'s partitions, by name, with their upper bound.
    func partitions(_ table: String) throws -> [String: Date] {
        var bounds: [String: Date] = [:]
        for row in try connection.query("SELECT name, upper_bound FROM receiptq_partitions(\(table)::regclass)").rows {
            if let name = row.string("name"), let upper = row.date("upper_bound") { bounds[name] = upper }
        }
        return bounds
    }

    func calls(_ app: AppRecord) throws -> Int {
        try connection.query(
            "SELECT count(*) AS n FROM validation_attempts WHERE receipt_id IN (SELECT id FROM receipts WHERE app_id = \(app.id))"
        ).rows.first?.int("n") ?? -1
    }

    func store(_ app: AppRecord, calls: Int, at: Date) throws {
        try RetentionTests.storeValidation(app, calls: calls, enqueuedAt: at, connection: connection)
    }

    @Test("The migration makes the old tables legacy partitions, and the step keeps two weeks of partitions ahead")
    func partitionsAhead() throws {
        for table in ["validation_attempts", "audit_log"] {
            let legacy = try #require(try partitions(table)["\(table)_legacy"], "\(table): the old table, attached")
            #expect(legacy > Date(), "\(table): its range reaches past the conversion")
        }
        let later = Date().addingTimeInterval(60 * RetentionTests.day)
        let report = try sweep(at: later)
        #expect(report.partitionsCreated > 0)
        for table in ["validation_attempts", "audit_log"] {
            let furthest = try #require(try partitions(table).values.max())
            #expect(furthest >= later.addingTimeInterval(14 * RetentionTests.day), "\(table): two weeks ahead of the step's clock")
        }
        #expect(try sweep(at: later).partitionsCreated == 0, "already ahead: nothing more")
    }

    @Test("A row of a time no partition covers yet goes to the DEFAULT partition, and moves out when its range is created")
    func defaultPartition() throws {
        let far = Date().addingTimeInterval(300 * RetentionTests.day)
        try store(plain, calls: 2, at: far)
        let held = try connection.query("SELECT count(*) AS n FROM validation_attempts_default").rows.first?.int("n")
        #expect(held == 2, "never an insert refused")
        _ = try sweep(at: far)
        let moved = try connection.query(
            "SELECT count(*) FILTER (WHERE tableoid = 'validation_attempts_default'::regclass) AS held, count(*) AS n FROM validation_attempts"
        ).rows.first
        #expect(moved?.int("held") == 0)
        #expect(moved?.int("n") == 2, "moved, not lost")
    }

    @Test("A partition whose every row has expired for every app is dropped whole, the legacy one too; purchases stay")
    func wholePartitionDropped() throws {
        try store(plain, calls: 3, at: Date())
        try store(plain, calls: 2, at: Date().addingTimeInterval(10 * RetentionTests.day))
        let before = try partitions("validation_attempts")
        #expect(before["validation_attempts_legacy"] != nil)

        // 120 days on: past the deployment's 90 days for both; the own app (forever) has no row in them.
        let report = try sweep(at: Date().addingTimeInterval(120 * RetentionTests.day))
        let after = try partitions("validation_attempts")
        #expect(after["validation_attempts_legacy"] == nil, "the legacy partition went when its range expired")
        #expect((report.partitionsDropped[.appleCallAttempts] ?? 0) >= 2)
        #expect(report.deleted[.appleCallAttempts] == 0, "dropped, not deleted row by row")
        #expect(try calls(plain) == 0)
        let purchases = try connection.query("SELECT count(*) AS n FROM in_app_purchases WHERE app_id = \(plain.id)").rows.first?.int("n")
        #expect(purchases == 2, "purchases are never dropped")
        #expect(try partitions("audit_log")["audit_log_legacy"] != nil, "the audit log keeps 730 days")
    }

    @Test("An app that keeps longer keeps its partition; batched deletes take the other apps' rows in it")
    func perAppFallback() throws {
        let at = Date().addingTimeInterval(10 * RetentionTests.day)
        try store(plain, calls: 3, at: at)
        try store(own, calls: 2, at: at)
        let report = try sweep(at: Date().addingTimeInterval(120 * RetentionTests.day))
        let partition = try #require(
            try connection.query(
                "SELECT tableoid::regclass::text AS name FROM validation_attempts WHERE created_at = \(at)::timestamptz LIMIT 1"
            ).rows.first?.string("name"))
        #expect(try partitions("validation_attempts")[partition] != nil, "kept: the own app keeps its calls forever")
        #expect(try calls(plain) == 0, "the plain app's rows deleted in batches")
        #expect(report.deleted[.appleCallAttempts] == 3)
        #expect(try calls(own) == 2)
    }

    @Test("A replayed job writes its calls once: they are filed under the job's enqueue time")
    func replayWritesCallsOnce() throws {
        let envelope = JobEnvelope(
            id: JobID.make(), appID: plain.id, enqueuedAt: Date().addingTimeInterval(-RetentionTests.day), origin: .api,
            payload: .receipt(ReceiptJob(receipt: "MIIreplay", style: .unified, bundleID: "com.example.retention", environment: "sandbox")))
        let call = AppleCall(endpoint: .sandbox, httpStatus: 200, appleStatus: 0, isRetryable: nil, latencyMs: 2, errorCode: nil)
        let store = PostgresReceiptStore(connection: connection)
        for validatedAt in [Date(), Date().addingTimeInterval(5)] {
            // The replay calls Apple again, later: the same job, attempt and calls.
            let record = ValidationRecord(
                envelope: envelope, status: .valid, environment: "sandbox", appleStatus: 0, purchases: [], latestReceipt: nil,
                calls: [call, call], validatedAt: validatedAt)
            _ = try store.save([record])
        }
        let rows = try connection.query("SELECT created_at FROM validation_attempts WHERE job_id = \(envelope.id)").rows
        #expect(rows.count == 2)
        #expect(rows.allSatisfy { abs(($0.date("created_at") ?? .distantPast).timeIntervalSince(envelope.enqueuedAt)) < 0.001 })
    }

    @Test("A compressed retention day (RETENTION_DAY_SECONDS, for a soak) scales the days the step applies")
    func compressedDay() throws {
        try store(plain, calls: 3, at: Date())
        try store(own, calls: 1, at: Date())
        let seconds = RetentionPolicy(daySeconds: 1)
        #expect(try sweep(at: Date().addingTimeInterval(60), policy: seconds).deleted[.appleCallAttempts] == 0, "60 s: under 90 days")
        let report = try sweep(at: Date().addingTimeInterval(120), policy: seconds)
        #expect(report.deleted[.appleCallAttempts] == 3, "120 s: past 90 days of a second")
        #expect(try calls(plain) == 0)
        #expect(try calls(own) == 1, "0 keeps forever, whatever a day lasts")
    }
}
