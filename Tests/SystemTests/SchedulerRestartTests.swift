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

        var logger = Logger(label: "it.scheduler-restart")
        logger.logLevel = .critical
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
        func waitForQueue(_ count: Int) async throws {
            for _ in 0..<600 {
                if (try? queued().count) ?? 0 >= count { return }
                try await Task.sleep(for: .milliseconds(100))
            }
            Issue.record("the repoll queue never held \(count) jobs (it holds \((try? queued().count) ?? -1))")
        }

        try seed(50)
        try await waitForQueue(50)

        // Postgres goes away and comes back; subscriptions fall due after.
        try await offload { try postgres.stop(mode: "fast") }
        try await Task.sleep(for: .seconds(2))
        try await offload { try postgres.start() }
        try seed(30)
        try await waitForQueue(80)

        // Redis goes away (its AOF keeps the queue) and comes back: the budget and enqueue scripts
        // are loaded again, and what fell due meanwhile is queued.
        try await offload { try redisServer.shutdown() }
        try seed(20)
        try await Task.sleep(for: .seconds(2))
        try await offload { try redisServer.start() }
        try await waitForQueue(100)
        try await Task.sleep(for: .seconds(2))

        let jobs = try queued()
        #expect(jobs.count == 100)
        #expect(Set(jobs.compactMap { $0.payload.repollJob?.target.originalTransactionID }).count == 100)
        let connection = try PostgresConnection(configuration: configuration.postgres)
        defer { connection.close() }
        let rows = try await connection.query("SELECT poll_seq FROM subscriptions WHERE app_id = \(app.id)").rows
        #expect(rows.count == 100)
        #expect(rows.allSatisfy { $0.int("poll_seq") == 1 })
        await group.triggerGracefulShutdown()
        _ = try? await task.value
    }
}
