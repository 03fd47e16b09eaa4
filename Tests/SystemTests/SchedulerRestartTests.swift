import DevTools
import Foundation
import Hiredis
import Libpq
import Logging
import MockAppStore
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import ServiceLifecycle
import SystemTesting
import Testing

/// The re-poll scheduler under Postgres and Redis restarts (its own throwaway servers, as in
/// RestartTests): it reconnects by itself, and queues every due subscription exactly once.
@Suite(
    "Restarts: the re-poll scheduler survives Postgres and Redis restarts", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled),
    .serialized)
struct SchedulerRestartTests {
    @Test("Postgres stopped and Redis shut down under a running scheduler: re-polls due meanwhile are queued once each, after")
    func survivesRestarts() async throws {
        let postgres = try await offload { try ThrowawayPostgres() }
        defer { postgres.destroy() }
        let redisServer = try await offload { try ThrowawayRedis() }
        defer { redisServer.destroy() }
        try await offload { try postgres.createDatabase(user: "receiptq", database: "receiptq_schedule") }
        let configuration = try AppConfiguration(environment: [
            "REDIS_HOSTNAME": "127.0.0.1", "REDIS_PORT": String(redisServer.port), "REDIS_KEY_PREFIX": "{rqs}",
            "POSTGRES_HOSTNAME": "127.0.0.1", "POSTGRES_PORT": String(postgres.port), "POSTGRES_USER": "receiptq",
            "POSTGRES_DB": "receiptq_schedule", "REPOLL_BATCH_SIZE": "20",
        ])
        try ReceiptQueueApp.migrate(configuration)
        let app = try {
            let connection = try PostgresConnection(configuration: configuration.postgres)
            defer { connection.close() }
            return try AppAdmin(connection: connection).addApp(name: "sched", bundleID: "com.example.sched", sharedSecret: "s").0
        }()

        // Its warnings are counted: they are how the test knows the scheduler met each outage.
        let log = LogRecorder()
        let logger = log.logger(label: "it.scheduler-restart")
        let group = ServiceGroup(
            services: [ReceiptQueueApp.makeScheduler(configuration, logger: logger)], gracefulShutdownSignals: [], logger: logger)
        let task = Task(executorPreference: ServerThreads.shared) { try await group.run() }
        defer { task.cancel() }

        var seeded = 0
        /// Adds `count` subscriptions due a minute ago, each on its own receipt.
        func seed(_ count: Int) throws {
            let connection = try PostgresConnection(configuration: configuration.postgres)
            defer { connection.close() }
            _ = try connection.query(
                """
                WITH r AS (
                    INSERT INTO receipts (id, app_id, status, receipt_data, created_at, environment)
                    SELECT gen_random_uuid(), \(app.id), 'valid', 'MIIreceipt-' || n, now(), 'sandbox'
                    FROM generate_series(\(seeded + 1)::int, \(seeded + count)::int) AS n
                    RETURNING id, receipt_data
                )
                INSERT INTO subscriptions (app_id, environment, original_transaction_id, product_id, state, expires_at,
                    latest_transaction_id, receipt_id, observed_at, next_poll_at)
                SELECT \(app.id), 'sandbox', substr(r.receipt_data, 12), 'monthly', 'active', now() + interval '1 hour', 't',
                       r.id, now(), now() - interval '1 minute'
                FROM r
                """)
            seeded += count
        }
        func queued() throws -> [JobEnvelope] {
            let redis = try RedisConnection(configuration: configuration.redis)
            defer { redis.close() }
            guard case .array(let items) = try redis.send(["LRANGE", configuration.keys.queue("repoll"), "0", "-1"]) else { return [] }
            return items.compactMap { $0.bytes.flatMap { try? JobEnvelope.decode($0) } }
        }
        func queueHolds(_ count: Int) async throws -> Bool {
            try await eventually(timeout: .seconds(60), interval: .milliseconds(100)) { (try? queued().count) ?? 0 >= count }
        }
        /// Waits until the scheduler's re-poll step has failed twice more (one whole step, at least,
        /// began after the call): it met the outage.
        func metOutage() async throws -> Bool {
            let before = log.count("Re-poll step failed")
            return try await eventually(timeout: .seconds(60), interval: .milliseconds(100)) { log.count("Re-poll step failed") >= before + 2 }
        }

        try seed(50)
        #expect(try await queueHolds(50), "\((try? queued().count) ?? -1) queued")

        // Postgres goes away and comes back; subscriptions fall due after.
        try await offload { try postgres.stop(mode: "fast") }
        #expect(try await metOutage(), "the scheduler met the Postgres outage")
        try await offload { try postgres.start() }
        try seed(30)
        #expect(try await queueHolds(80), "\((try? queued().count) ?? -1) queued")

        // Redis goes away (its AOF keeps the queue) and comes back: the budget and enqueue scripts
        // are loaded again, and what fell due meanwhile is queued.
        try await offload { try redisServer.shutdown() }
        try seed(20)
        #expect(try await metOutage(), "the scheduler met the Redis outage with 20 due")
        try await offload { try redisServer.start() }
        #expect(try await queueHolds(100), "\((try? queued().count) ?? -1) queued")
        // One more falls due and is queued: the scheduler has been round again since the 100th,
        // and had any of them been due a second time, it would be queued by now too.
        try seed(1)
        #expect(try await queueHolds(101), "\((try? queued().count) ?? -1) queued")

        let jobs = try queued()
        #expect(jobs.count == 101)
        #expect(Set(jobs.compactMap { $0.payload.repollJob?.target.originalTransactionID }).count == 101)
        let connection = try PostgresConnection(configuration: configuration.postgres)
        defer { connection.close() }
        let rows = try await connection.query("SELECT poll_seq FROM subscriptions WHERE app_id = \(app.id)").rows
        #expect(rows.count == 101)
        #expect(rows.allSatisfy { $0.int("poll_seq") == 1 })
        await group.triggerGracefulShutdown()
        _ = try? await task.value
    }
}
