import DevTools
import Dispatch
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
import Synchronization
import SystemTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Redis and Postgres restarted under a running system: nothing lost, nothing stored twice.
///
/// The shared test servers are never restarted (other suites run against them in parallel): each
/// test starts its own throwaway `redis-server` or Postgres cluster on a free loopback port in a
/// temp dir, restarts that one mid-run, and deletes it at the end, also when the test fails.
@Suite("Restarts: Redis and Postgres restarted mid-run", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct RestartTests {
    static let jobs = 2000
    /// Jobs put straight into the retry set once Redis is back (retries that fell due during the
    /// outage): the scheduler must recover its connection (and its Lua script, which a restart
    /// forgets) by itself to promote them.
    static let retriesAfterRestart = 100

    // MARK: - Redis

    @Test("Redis shut down (SHUTDOWN, AOF flushed) and restarted mid-run: every job validated exactly once")
    func redisShutdownAndRestart() async throws {
        try await redisRestart(crash: false)
    }

    @Test("Redis killed (SIGKILL) and restarted mid-run: every job it still holds validated exactly once")
    func redisKillAndRestart() async throws {
        try await redisRestart(crash: true)
    }

    private func redisRestart(crash: Bool) async throws {
        let server = try await offload { try ThrowawayRedis() }
        defer { server.destroy() }
        let system = try await RestartSystem.start(environment: [
            "REDIS_HOSTNAME": "127.0.0.1", "REDIS_PORT": String(server.port),
            "POSTGRES_HOSTNAME": TestEnvironment.postgresHost, "POSTGRES_PORT": String(TestEnvironment.postgresPort),
            "POSTGRES_USER": TestEnvironment.postgresUser, "POSTGRES_DB": TestEnvironment.postgresDatabase,
        ])
        do {
            try await redisScenario(system, server, crash: crash)
        } catch {
            await system.stop()
            throw error
        }
        await system.stop()
    }

    private func redisScenario(_ system: RestartSystem, _ server: ThrowawayRedis, crash: Bool) async throws {
        let envelopes = system.makeEnvelopes(Self.jobs)
        let queued = Array(envelopes.dropLast(Self.retriesAfterRestart))
        let heldBack = Array(envelopes.suffix(Self.retriesAfterRestart))
        try system.enqueue(queued)
        if crash {
            // The jobs were accepted before a point Redis made durable (see below): an AOF rewrite,
            // fsynced when it completes.
            try await offload { try server.rewriteAppendOnlyFile() }
        }
        let started = ContinuousClock.now
        // After a third of the jobs, ~100 answers a second: the rest take over 12 s, so the outage
        // below comes before the last of them unless this test is held up for longer than that.
        system.pace(fast: Self.jobs / 3, thenDelayMs: 150)
        system.startWorkers()

        // Mid-run: a good part stored, most still to do, jobs in the lanes' hands.
        // Generous: with every other suite running, a sixth of the jobs took over 30 s in some runs.
        try await system.waitUntilStored(atLeast: Self.jobs / 6, timeout: .seconds(90))
        let storedAtRestart = try system.validIDs().count
        #expect(storedAtRestart < Self.jobs, "Redis went down mid-run")
        let fetchErrors = system.log.count("Worker fetch error")
        if crash { try await offload { try server.kill() } } else { try await offload { try server.shutdown() } }
        system.unpace()
        // Down until the workers met it: their fetcher failed to reach Redis.
        let met = try await eventually(timeout: .seconds(60), interval: .milliseconds(50)) { system.log.count("Worker fetch error") > fetchErrors }
        #expect(met, "the workers met the Redis outage")
        try await offload { try server.start() }

        // What Redis still holds once it is back: with SHUTDOWN, everything; after SIGKILL, see below.
        let survivors = try system.idsHeldByRedis()
        try system.scheduleRetries(heldBack)
        try await system.waitUntilDrained(expected: Self.jobs, timeout: .seconds(150))
        print(
            "RestartTests: Redis \(crash ? "SIGKILL" : "SHUTDOWN") after \(storedAtRestart) of \(Self.jobs) stored; "
                + "\(survivors.count) jobs in Redis after the restart; all done \(ContinuousClock.now - started) after the start")

        let valid = try system.validIDs()
        let all = Set(envelopes.map(\.id))
        if crash {
            // SIGKILL with `appendfsync everysec`: Redis write()s its AOF buffer to the file before it
            // answers, so a killed *process* loses at most the writes of a lagging fsync (Redis
            // postpones the write up to 2 s while a previous fsync is still running); a crash of the
            // *machine* loses up to ~1 s of acknowledged writes. "Nothing lost" can therefore only
            // promise: every job Redis accepted before its last fsync survives, and a job accepted in
            // the last second may be gone (a client needing more must use WAIT/WAITAOF or
            // `appendfsync always`). A lost write of a later *move* (BLMOVE, ack, retry) is harmless:
            // Redis comes back in an earlier state where the job is still queued or in processing,
            // and the replay stores nothing twice.
            //
            // So: every job Redis still holds after the restart ends valid, exactly once; and since
            // the enqueue was made durable before the workers started (the AOF rewrite above), no job
            // is lost at all.
            #expect(survivors.isSubset(of: valid), "a job Redis held after the restart was not validated")
        }
        #expect(valid.subtracting(all).isEmpty)
        #expect(all.subtracting(valid).isEmpty, "jobs lost: \(all.subtracting(valid).count)")
        #expect(try system.counts() == RedisCounts(queue: 0, processing: 0, retry: 0, dead: 0))
        // Exactly once: one receipt row per job (its primary key) and one Apple call recorded per
        // job (a production receipt needs one), even for jobs stored but not acknowledged when Redis
        // went away and then replayed.
        let audit = try system.auditAttempts()
        #expect(audit.receipts == Self.jobs)
        #expect(audit.withoutExactlyOneCall == 0, "receipts without exactly one recorded Apple call")
    }

    // MARK: - Postgres

    @Test("Postgres stopped (fast) and restarted mid-run: every job validated exactly once, nothing dead")
    func postgresFastStopAndRestart() async throws {
        try await postgresRestart(mode: "fast")
    }

    @Test("Postgres crashed (immediate) and restarted mid-run: every job validated exactly once, nothing dead")
    func postgresImmediateStopAndRestart() async throws {
        try await postgresRestart(mode: "immediate")
    }

    private func postgresRestart(mode: String) async throws {
        let server = try await offload { try ThrowawayPostgres() }
        defer { server.destroy() }
        try await offload { try server.createDatabase(user: "receiptq", database: "receiptq_restart") }
        let system = try await RestartSystem.start(environment: [
            "REDIS_HOSTNAME": TestEnvironment.redisHost, "REDIS_PORT": String(TestEnvironment.redisPort),
            "POSTGRES_HOSTNAME": "127.0.0.1", "POSTGRES_PORT": String(server.port),
            "POSTGRES_USER": "receiptq", "POSTGRES_DB": "receiptq_restart",
        ])
        do {
            try await postgresScenario(system, server, mode: mode)
        } catch {
            await system.stop()
            throw error
        }
        await system.stop()
    }

    private func postgresScenario(_ system: RestartSystem, _ server: ThrowawayPostgres, mode: String) async throws {
        let envelopes = system.makeEnvelopes(Self.jobs)
        try system.enqueue(envelopes)
        let started = ContinuousClock.now
        system.pace(fast: Self.jobs / 3, thenDelayMs: 150)  // as in the Redis scenario
        system.startWorkers()

        try await system.waitUntilStored(atLeast: Self.jobs / 6, timeout: .seconds(90))
        let storedAtRestart = try system.validIDs().count
        #expect(storedAtRestart < Self.jobs, "Postgres went down mid-run")
        let storeErrors = system.log.count("Worker store error")
        try await offload { try server.stop(mode: mode) }
        // Fast again, so that the lanes meet the outage (each answer's store fails) and the run's
        // tail is the outage, not the pace.
        system.unpace()
        // While Postgres is down the lanes keep taking jobs: each fails to store and goes to the
        // retry set as store_unavailable, to come back through the scheduler's promotion. Down
        // until a commit failed so.
        let met = try await eventually(timeout: .seconds(60), interval: .milliseconds(50)) { system.log.count("Worker store error") > storeErrors }
        #expect(met, "the workers met the Postgres outage")
        try await offload { try server.start() }

        try await system.waitUntilDrained(expected: Self.jobs, timeout: .seconds(150))
        let audit = try system.auditAttempts()
        print(
            "RestartTests: Postgres stop -m \(mode) after \(storedAtRestart) of \(Self.jobs) stored; "
                + "\(audit.retriedByStoreFailure) stored by a retry; all done \(ContinuousClock.now - started) after the start")
        let valid = try system.validIDs()
        let all = Set(envelopes.map(\.id))
        #expect(valid == all, "jobs lost: \(all.subtracting(valid).count)")
        #expect(try system.counts() == RedisCounts(queue: 0, processing: 0, retry: 0, dead: 0))
        #expect(audit.receipts == Self.jobs)
        // A job whose store failed runs again as its next attempt, so a receipt may record more
        // than one attempt (one whose COMMIT succeeded but whose answer was lost with the server,
        // then its replay: both Apple calls really happened). Exactly once here means: one receipt
        // row per job, and exactly one recorded Apple call per attempt, never a replayed call twice.
        #expect(audit.attemptsWithoutExactlyOneCall == 0)
        #expect(audit.retriedByStoreFailure > 0, "the outage was seen by the workers (jobs retried as store_unavailable)")
    }
}

// MARK: - The system under test

struct RedisCounts: Equatable, CustomStringConvertible {
    var queue: Int
    var processing: Int
    var retry: Int
    var dead: Int
    var description: String { "queue \(queue), processing \(processing), retry \(retry), dead \(dead)" }
}

/// Workers and scheduler in-process (what `receiptq work` and `receiptq schedule` run) against the
/// given Redis and Postgres, a mock App Store answering after ~10 ms, one app and one production
/// receipt (one Apple call per job).
final class RestartSystem: Sendable {
    let configuration: AppConfiguration
    let mock: RunningMockAppStore
    let app: AppRecord
    /// Production receipts (one Apple call each), base64; the jobs take them in turn.
    let receipts: [String]
    /// The warnings of the workers and the scheduler, counted: how a scenario knows they met its outage.
    let log: LogRecorder
    private let group: ServiceGroup
    private let task = Mutex<Task<Void, any Error>?>(nil)

    static func start(environment overrides: [String: String]) async throws -> RestartSystem {
        let mock = try await MockAppStore.start(state: MockAppStoreState(baseDelay: .milliseconds(10)))
        do {
            var environment = [
                "REDIS_KEY_PREFIX": "{rqt-\(UUID().uuidString.prefix(8).lowercased())}",
                "APPSTORE_PRODUCTION_URL": mock.productionURL, "APPSTORE_SANDBOX_URL": mock.sandboxURL,
                "APPSTORE_REQUEST_TIMEOUT_MS": "5000",
                "WORKER_CONCURRENCY": "16", "WORKER_SHUTDOWN_TIMEOUT_SECONDS": "5",
                // A store failure comes back within a few hundred ms, and the backoff of a job that
                // failed many times during the outage stays short: the test's tail is the outage.
                "RETRY_BASE_MS": "100", "RETRY_MAX_BACKOFF_SECONDS": "2",
            ]
            if let password = TestEnvironment.postgresPassword { environment["POSTGRES_PASSWORD"] = password }
            environment.merge(overrides) { _, new in new }
            let configuration = try AppConfiguration(environment: environment)
            try ReceiptQueueApp.migrate(configuration)
            let connection = try PostgresConnection(configuration: configuration.postgres)
            defer { connection.close() }
            let (app, _) = try AppAdmin(connection: connection).addApp(
                name: "restart-\(UUID().uuidString)", bundleID: "com.example.restart.\(UUID().uuidString.prefix(8).lowercased())",
                sharedSecret: "s")
            mock.state.setSharedSecret("s", for: app.bundleID)
            // Several receipts, each with its own transactions: with one, every job's transaction
            // would wait on the same two ledger rows and the lanes would run one at a time. The
            // forger derives transaction ids from `now` (whole seconds): a distinct one each, away
            // from other suites' receipts forged at the same time.
            let offset = Double(Int.random(in: 0..<400_000))
            let receipts = try (0..<16).map { index in
                var receipt = ReceiptForger.demoReceipt(bundleID: app.bundleID, now: Date().addingTimeInterval(-offset - Double(index)))
                receipt.environment = .production
                return Data(try ReceiptForger.unified(receipt, authority: try TestSystem.sharedAuthority.get())).base64EncodedString()
            }

            let log = LogRecorder()
            // The lanes warn on every failed call while a server is down; errors are what is shown.
            let logger = log.logger(
                label: "it.restart", printing: ProcessInfo.processInfo.environment["RESTART_TESTS_LOG"] == "1" ? .info : .error)
            let services: [any Service] = [
                try ReceiptQueueApp.makeWorker(configuration, logger: logger),
                ReceiptQueueApp.makeScheduler(configuration, onlyApps: [app.id], logger: logger),
            ]
            let group = ServiceGroup(services: services, gracefulShutdownSignals: [], logger: logger)
            return RestartSystem(configuration: configuration, mock: mock, app: app, receipts: receipts, log: log, group: group)
        } catch {
            await mock.stop()
            throw error
        }
    }

    private init(
        configuration: AppConfiguration, mock: RunningMockAppStore, app: AppRecord, receipts: [String], log: LogRecorder, group: ServiceGroup
    ) {
        self.configuration = configuration
        self.log = log
        self.mock = mock
        self.app = app
        self.receipts = receipts
        self.group = group
    }

    /// Paces the mock so that a scenario's outage falls mid-run by construction, not by timing: the
    /// first `fast` answers come at the mock's own pace, every later one `delayMs` after it, until
    /// ``unpace()``. Unpaced, 16 lanes did 2,000 jobs in ~1.5 s, and in a full local run the test reached
    /// the stop only after all of them were stored.
    func pace(fast: Int, thenDelayMs delayMs: Int) {
        mock.state.addRule(MockRule(times: fast))
        mock.state.addRule(MockRule(delayMs: delayMs))
    }

    /// Every answer at the mock's own pace again.
    func unpace() { mock.state.clearRules() }

    func startWorkers() {
        task.withLock { task in
            guard task == nil else { return }
            task = Task(executorPreference: ServerThreads.shared) { [group] in try await group.run() }
        }
    }

    func stop() async {
        if let task = task.withLock({ $0 }) {
            await group.triggerGracefulShutdown()
            _ = try? await task.value
        }
        await mock.stop()
    }

    func makeEnvelopes(_ count: Int) -> [JobEnvelope] {
        (0..<count).map { index in
            JobEnvelope(
                id: JobID.make(), appID: app.id, enqueuedAt: Date(), origin: .api,
                payload: .receipt(ReceiptJob(receipt: receipts[index % receipts.count])))
        }
    }

    private func redis() throws -> RedisConnection { try RedisConnection(configuration: configuration.redis, label: "restart-test") }

    /// LPUSHes the jobs as the API does (without the pending resource, which only the API reads).
    func enqueue(_ envelopes: [JobEnvelope]) throws {
        let redis = try redis()
        defer { redis.close() }
        let queue = Array(configuration.keys.queue(JobKind.validate.rawValue).utf8)
        for start in stride(from: 0, to: envelopes.count, by: 500) {
            let replies = try redis.pipeline(
                bytes: envelopes[start..<min(start + 500, envelopes.count)].map { [Array("LPUSH".utf8), queue, $0.encoded()] })
            #expect(!replies.contains { if case .error = $0 { true } else { false } })
        }
    }

    /// Puts jobs into the retry set, due now.
    func scheduleRetries(_ envelopes: [JobEnvelope]) throws {
        let redis = try redis()
        defer { redis.close() }
        let now = String(Int64(Date().timeIntervalSince1970 * 1000))
        _ = try redis.pipeline(bytes: envelopes.map { [Array("ZADD".utf8), Array(configuration.keys.retry.utf8), Array(now.utf8), $0.encoded()] })
    }

    /// The ids of this app's receipts stored as valid.
    func validIDs() throws -> Set<UUID> {
        let connection = try PostgresConnection(configuration: configuration.postgres, label: "restart-test")
        defer { connection.close() }
        let rows = try connection.query("SELECT id FROM receipts WHERE app_id = \(app.id) AND status = 'valid'").rows
        return Set(rows.compactMap { $0.uuid("id") })
    }

    /// Every processing list under this system's prefix, whether or not its worker is registered.
    private func processingKeys(_ redis: RedisConnection) throws -> [String] {
        var keys: [String] = []
        var cursor = "0"
        repeat {
            let reply = try redis.send(["SCAN", cursor, "MATCH", "\(configuration.keys.prefix):processing:*", "COUNT", "1000"])
            guard case .array(let parts) = reply, parts.count == 2 else { break }
            cursor = parts[0].string ?? "0"
            keys += (parts[1].array ?? []).compactMap(\.string)
        } while cursor != "0"
        return keys
    }

    func counts() throws -> RedisCounts {
        let redis = try redis()
        defer { redis.close() }
        let keys = configuration.keys
        let processing = try processingKeys(redis).reduce(0) { $0 + (try redis.send(["LLEN", $1]).int ?? 0) }
        return RedisCounts(
            queue: try redis.send(["LLEN", keys.queue(JobKind.validate.rawValue)]).int ?? -1, processing: processing,
            retry: try redis.send(["ZCARD", keys.retry]).int ?? -1, dead: try redis.send(["ZCARD", keys.dead]).int ?? -1)
    }

    /// The ids of the jobs Redis holds anywhere: queued, in a lane's hands, waiting to retry, dead.
    func idsHeldByRedis() throws -> Set<UUID> {
        let redis = try redis()
        defer { redis.close() }
        let keys = configuration.keys
        var members: [RedisValue] = []
        members += try redis.send(["LRANGE", keys.queue(JobKind.validate.rawValue), "0", "-1"]).array ?? []
        for key in try processingKeys(redis) { members += try redis.send(["LRANGE", key, "0", "-1"]).array ?? [] }
        members += try redis.send(["ZRANGE", keys.retry, "0", "-1"]).array ?? []
        members += try redis.send(["ZRANGE", keys.dead, "0", "-1"]).array ?? []
        return Set(members.compactMap { $0.bytes.flatMap { try? JobEnvelope.decode($0).id } })
    }

    /// Waits until at least `count` receipts are stored; a server being down only delays it.
    func waitUntilStored(atLeast count: Int, timeout: Duration) async throws {
        var stored = 0
        let reached = try await eventually(timeout: timeout, interval: .milliseconds(50)) {
            stored = (try? validIDs().count) ?? stored
            return stored >= count
        }
        if reached { return }
        Issue.record("only \(stored) of \(count) receipts stored after \(timeout)")
        throw RestartTestError("timed out waiting for receipts")
    }

    /// Waits until `expected` receipts are stored and Redis holds none of the jobs any more (the
    /// acknowledgement follows the commit, so the two are awaited together).
    func waitUntilDrained(expected: Int, timeout: Duration) async throws {
        var stored = -1
        var counts: RedisCounts?
        let drained = try await eventually(timeout: timeout, interval: .milliseconds(100)) {
            stored = (try? validIDs().count) ?? stored
            counts = (try? self.counts()) ?? counts
            return stored == expected && counts == RedisCounts(queue: 0, processing: 0, retry: 0, dead: 0)
        }
        if drained { return }
        Issue.record("after \(timeout): \(stored) of \(expected) stored; Redis: \(counts.map { "\($0)" } ?? "unreachable")")
    }

    struct AttemptAudit {
        /// This app's receipt rows.
        var receipts: Int
        /// Receipts with no or several rows in `validation_attempts`.
        var withoutExactlyOneCall: Int
        /// (receipt, attempt) pairs with several recorded calls (a production receipt needs one).
        var attemptsWithoutExactlyOneCall: Int
        /// Receipts stored by an attempt after a store failure.
        var retriedByStoreFailure: Int
    }

    func auditAttempts() throws -> AttemptAudit {
        let connection = try PostgresConnection(configuration: configuration.postgres, label: "restart-test")
        defer { connection.close() }
        let row = try connection.query(
            """
            WITH per_receipt AS (
              SELECT r.id, r.error_code, count(a.id) AS calls, count(DISTINCT a.attempt) AS attempts, max(a.attempt) AS last_attempt
              FROM receipts r LEFT JOIN validation_attempts a ON a.receipt_id = r.id
              WHERE r.app_id = \(app.id) GROUP BY r.id, r.error_code)
            SELECT count(*) AS receipts,
                   count(*) FILTER (WHERE calls <> 1) AS odd_receipts,
                   count(*) FILTER (WHERE calls <> attempts OR attempts = 0) AS odd_attempts,
                   count(*) FILTER (WHERE last_attempt > 0) AS retried
            FROM per_receipt
            """
        ).rows.first
        return AttemptAudit(
            receipts: row?.int("receipts") ?? -1, withoutExactlyOneCall: row?.int("odd_receipts") ?? -1,
            attemptsWithoutExactlyOneCall: row?.int("odd_attempts") ?? -1, retriedByStoreFailure: row?.int("retried") ?? -1)
    }
}
