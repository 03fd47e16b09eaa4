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
import Testing

/// The scheduler's two clocks against real Postgres and Redis: re-poll claims on the re-poll
/// clock (the one the worker plans polls on), the queue's chores and the jobs on its own.
@Suite("Scheduler: re-polls claimed on the re-poll clock", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct RepollClockTests {
    static let base = Date(timeIntervalSince1970: 1_800_000_000)

    @Test("The re-poll clock makes polls due; the jobs are dated on the scheduler's own clock; the lease counts on the re-poll clock")
    func claimsOnTheRepollClock() async throws {
        let configuration = try TestSystem.migratedDatabase()
        let connection = try PostgresConnection(configuration: configuration.postgres)
        defer { connection.close() }
        let (app, _) = try AppAdmin(connection: connection).addApp(
            name: "clock-\(UUID().uuidString)", bundleID: "com.example.clock", sharedSecret: "s")
        let count = 5
        let due = Self.base.addingTimeInterval(86_400)
        try DueSubscriptions.seed(
            count, of: app, tag: "clock", observedAt: Self.base, pollAt: due, expiresAt: due.addingTimeInterval(86_400), on: connection)
        let keys = RedisKeys(prefix: "{rqt-\(UUID().uuidString.prefix(8).lowercased())}")
        @Sendable func redis() throws -> RedisConnection {
            try RedisConnection(configuration: RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort))
        }
        // The machine's clock stays a day before the polls; the re-poll clock passes them.
        let machine = MockClock(start: Self.base)
        let repolls = MockClock(start: due.addingTimeInterval(60))
        var logger = Logger(label: "scheduler-clock-test")
        logger.logLevel = .warning
        let scheduler = Scheduler(
            configuration: .init(tickInterval: .milliseconds(20), repollBatch: 25, repollLease: .seconds(3600)),
            makeMaintenance: { RedisMaintenance(connection: try redis(), keys: keys) },
            makeRepolls: {
                (
                    PostgresSubscriptionSchedule(connection: try PostgresConnection(configuration: configuration.postgres), apps: [app.id]),
                    RedisRepollQueue(connection: try redis(), keys: keys, ratePerSecond: 100_000)
                )
            }, now: machine.closure, repollNow: repolls.closure, logger: logger)
        let task = Task { try await scheduler.run() }
        let queue = try redis()
        defer { queue.close() }
        let all = try await eventually(timeout: .seconds(20)) { try queue.send(["LLEN", keys.queue("repoll")]).int ?? 0 >= count }
        task.cancel()
        _ = try? await task.value
        #expect(all, "every subscription due on the re-poll clock is queued")
        guard case .array(let items) = try queue.send(["LRANGE", keys.queue("repoll"), "0", "-1"]) else {
            Issue.record("no queue")
            return
        }
        let jobs = items.compactMap { item in item.bytes.flatMap { try? JobEnvelope.decode($0) } }
        #expect(jobs.count == count)
        #expect(jobs.allSatisfy { $0.enqueuedAt == Self.base }, "queued on the scheduler's own clock")
        let rows = try await connection.query("SELECT next_poll_at FROM subscriptions WHERE app_id = \(app.id)").rows
        #expect(rows.count == count)
        #expect(rows.allSatisfy { $0.date("next_poll_at") == repolls.now.addingTimeInterval(3600) }, "leased from the re-poll clock's now")
    }
}
