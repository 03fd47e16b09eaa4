import Dispatch
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
import Synchronization
import SystemTesting
import Testing

/// Subscriptions against real Postgres and Redis: the worker's upserts, and the scheduler's claims.
@Suite("Subscriptions: storage and re-poll scheduling", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct SubscriptionTests {
    let configuration: AppConfiguration
    let connection: PostgresConnection
    let app: AppRecord
    static let base = Date(timeIntervalSince1970: 1_800_000_000)

    init() throws {
        configuration = try TestSystem.migratedDatabase()
        connection = try PostgresConnection(configuration: configuration.postgres)
        (app, _) = try AppAdmin(connection: connection).addApp(
            name: "subs-\(UUID().uuidString)", bundleID: "com.example.subs", sharedSecret: "s")
    }

    func redis() throws -> RedisConnection {
        try RedisConnection(configuration: RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort))
    }

    func state(_ original: String, status: SubscriptionStatus, expires: Date, observed: Date, latest: String = "t1") -> SubscriptionState {
        SubscriptionState(
            originalTransactionID: original, productID: "monthly", status: status, expiresAt: expires,
            purchasedAt: expires.addingTimeInterval(-30 * 86_400), autoRenewStatus: true, latestTransactionID: latest, observedAt: observed)
    }

    func record(
        id: UUID = JobID.make(), user: String? = "alice", subscriptions: [PlannedSubscription], target: RepollTarget? = nil,
        status: ValidationStatus = .valid, at: Date = base
    ) -> ValidationRecord {
        let envelope = JobEnvelope(
            id: id, appID: app.id, enqueuedAt: at, origin: target == nil ? .api : .scheduler,
            payload: target.map {
                .repoll(
                    RepollJob(
                        target: $0, latestReceipt: "MIIreceipt-\(id)", style: .unified, bundleID: "com.example.subs", environment: "sandbox",
                        userIdentifier: user))
            }
                ?? .receipt(
                    ReceiptJob(
                        receipt: "MIIreceipt-\(id)", style: .unified, bundleID: "com.example.subs", environment: "sandbox",
                        submission: Submission(userIdentifier: user))))
        return ValidationRecord(
            envelope: envelope, status: status, environment: "sandbox", appleStatus: status == .valid ? 0 : 21010, purchases: [],
            latestReceipt: target == nil ? nil : "MIIlatest-\(id)",
            calls: [AppleCall(endpoint: .sandbox, httpStatus: 200, appleStatus: 0, isRetryable: nil, latencyMs: 2, errorCode: nil)],
            validatedAt: at, subscriptions: subscriptions)
    }

    func row(_ original: String) throws -> PostgresRow? {
        try connection.query(
            """
            SELECT state, expires_at, next_poll_at, poll_seq, user_identifier, receipt_id, last_poll_error, last_polled_at
            FROM subscriptions WHERE app_id = \(app.id) AND original_transaction_id = \(original)
            """
        ).rows.first
    }

    @Test("A validation files its subscriptions; an older answer never replaces a newer one; the first user keeps them")
    func upsertOrdering() throws {
        let store = PostgresReceiptStore(connection: connection)
        let original = "sub-\(UUID().uuidString)"
        let newer = Self.base.addingTimeInterval(3600)
        let fresh = record(
            subscriptions: [
                PlannedSubscription(
                    state: state(original, status: .active, expires: newer.addingTimeInterval(86_400), observed: newer),
                    nextPollAt: newer.addingTimeInterval(60))
            ],
            at: newer)
        let stale = record(
            user: "bob",
            subscriptions: [PlannedSubscription(state: state(original, status: .expired, expires: Self.base, observed: Self.base), nextPollAt: nil)])
        _ = try store.save([fresh])
        _ = try store.save([stale])
        let stored = try #require(try row(original))
        #expect(stored.string("state") == "active")
        #expect(stored.date("next_poll_at") == newer.addingTimeInterval(60))
        #expect(stored.string("user_identifier") == "alice")
        #expect(stored.uuid("receipt_id") == fresh.envelope.id)
        // Replaying the newer job is harmless.
        _ = try store.save([fresh, fresh])
        #expect(try row(original)?.string("state") == "active")
    }

    @Test("A re-poll files its answer under the receipt it re-sent, keyed by job, and leaves no receipt row of its own")
    func repollRecord() throws {
        let store = PostgresReceiptStore(connection: connection)
        let original = "sub-\(UUID().uuidString)"
        let first = record(subscriptions: [
            PlannedSubscription(
                state: state(original, status: .active, expires: Self.base.addingTimeInterval(600), observed: Self.base),
                nextPollAt: Self.base.addingTimeInterval(500))
        ])
        _ = try store.save([first])
        let target = RepollTarget(originalTransactionID: original, receiptID: first.envelope.id, pollSequence: 0)
        let later = Self.base.addingTimeInterval(700)
        let renewed = record(
            subscriptions: [
                PlannedSubscription(
                    state: state(original, status: .active, expires: later.addingTimeInterval(3000), observed: later, latest: "t2"),
                    nextPollAt: later.addingTimeInterval(2000))
            ],
            target: target, at: later)
        let results = try store.save([renewed])
        #expect(results.count == 1)
        #expect((try? results[0].get()) == .some(nil))
        let stored = try #require(try row(original))
        #expect(stored.date("expires_at") == later.addingTimeInterval(3000))
        #expect(stored.date("last_polled_at") == later)
        #expect(stored.string("last_poll_error") == nil)
        #expect(try connection.query("SELECT count(*) AS n FROM receipts WHERE id = \(renewed.envelope.id)").rows.first?.int("n") == 0)
        let attempts = try connection.query(
            "SELECT receipt_id, job_id FROM validation_attempts WHERE job_id = \(renewed.envelope.id)"
        ).rows
        #expect(attempts.map { $0.uuid("receipt_id") } == [first.envelope.id])
        #expect(
            try connection.query("SELECT latest_receipt FROM receipts WHERE id = \(first.envelope.id)").rows.first?.string("latest_receipt")
                == "MIIlatest-\(renewed.envelope.id)")

        // Apple refuses the receipt now (21010): polling stops, with the reason.
        let refused = record(subscriptions: [], target: target, status: .invalid, at: later.addingTimeInterval(5000))
        _ = try store.save([refused])
        let after = try #require(try row(original))
        #expect(after.string("last_poll_error") == FailureCode.apple(21010).rawValue)
        #expect(after.date("next_poll_at") == nil)
        #expect(after.string("state") == "active")
    }

    @Test("Two answers observed at the same instant: the one that knows the later period stays, whichever is stored last")
    func sameInstantKeepsTheLaterPeriod() throws {
        let store = PostgresReceiptStore(connection: connection)
        let original = "tie-\(UUID().uuidString)"
        let at = Self.base.addingTimeInterval(7 * 86_400)
        // The renewal (a notification) and a re-poll that read Apple's state just before it, at the
        // same instant (Apple dates both in milliseconds: two reads of one millisecond tie).
        let renewed = record(
            subscriptions: [
                PlannedSubscription(
                    state: state(original, status: .active, expires: at.addingTimeInterval(30 * 86_400), observed: at, latest: "t2"),
                    nextPollAt: at.addingTimeInterval(29 * 86_400))
            ], at: at)
        let racing = record(
            subscriptions: [PlannedSubscription(state: state(original, status: .expired, expires: at, observed: at), nextPollAt: nil)], at: at)
        _ = try store.save([renewed])
        _ = try store.save([racing])
        #expect(try row(original)?.string("state") == "active")
        #expect(try row(original)?.date("expires_at") == at.addingTimeInterval(30 * 86_400))
        // The same period seen again at that instant (a refund's revocation, say) is still written.
        let refunded = record(
            subscriptions: [
                PlannedSubscription(
                    state: state(original, status: .revoked, expires: at.addingTimeInterval(30 * 86_400), observed: at, latest: "t2"),
                    nextPollAt: nil)
            ], at: at)
        _ = try store.save([refunded])
        #expect(try row(original)?.string("state") == SubscriptionStatus.revoked.rawValue)
    }

    /// `count` subscriptions due at `base`, each on its own receipt.
    func seedDue(_ count: Int, tag: String) throws {
        try DueSubscriptions.seed(
            count, of: app, tag: tag, observedAt: Self.base, pollAt: Self.base.addingTimeInterval(-60),
            expiresAt: Self.base.addingTimeInterval(3600), on: connection)
    }

    @Test("Two schedulers at once never queue the same subscription twice")
    func twoSchedulers() async throws {
        let tag = "two-\(UUID().uuidString.prefix(8))"
        let count = 600
        try seedDue(count, tag: tag)
        let keys = RedisKeys(prefix: "{rqt-\(UUID().uuidString.prefix(8).lowercased())}")
        let clock = MockClock(start: Self.base)
        var logger = Logger(label: "scheduler-test")
        logger.logLevel = .warning
        let clocks = (0..<2).map { _ in CountingClock(clock) }
        let schedulers = clocks.map { clock in
            Scheduler(
                configuration: .init(tickInterval: .milliseconds(20), repollBatch: 25, repollLease: .seconds(3600)),
                makeMaintenance: { RedisMaintenance(connection: try self.redis(), keys: keys) },
                makeRepolls: {
                    (
                        PostgresSubscriptionSchedule(
                            connection: try PostgresConnection(configuration: self.configuration.postgres), apps: [self.app.id]),
                        RedisRepollQueue(connection: try self.redis(), keys: keys, ratePerSecond: 100_000)
                    )
                }, now: clock.closure, logger: logger)
        }
        let tasks = schedulers.map { scheduler in Task { try await scheduler.run() } }
        let redis = try redis()
        defer { redis.close() }
        func queued() throws -> [JobEnvelope] {
            guard case .array(let items) = try redis.send(["LRANGE", keys.queue("repoll"), "0", "-1"]) else { return [] }
            return items.compactMap { item in item.bytes.flatMap { try? JobEnvelope.decode($0) } }
        }
        let all = try await eventually(timeout: .seconds(20)) { try redis.send(["LLEN", keys.queue("repoll")]).int ?? 0 >= count }
        #expect(all, "every subscription queued")
        // Each scheduler has been round again (a whole tick since): a second enqueue, if there
        // were one, would show now.
        let reads = clocks.map(\.reads)
        #expect(try await eventually { zip(clocks, reads).allSatisfy { $0.reads >= $1 + CountingClock.readsPerTick } })
        for task in tasks { task.cancel() }
        for task in tasks { _ = try? await task.value }

        let jobs = try queued().filter { $0.payload.repollJob?.target.originalTransactionID.hasPrefix(tag) ?? false }
        #expect(jobs.count == count)
        #expect(Set(jobs.compactMap { $0.payload.repollJob?.target.originalTransactionID }).count == count)
        #expect(jobs.allSatisfy { $0.kind == .repoll && $0.origin == .scheduler && $0.payload.environment == "sandbox" })
        #expect(jobs.allSatisfy { $0.payload.repollJob?.userIdentifier == "alice" && $0.payload.carriedText.hasPrefix("MIIreceipt-") })
        let rows = try await connection.query(
            """
            SELECT poll_seq, next_poll_at FROM subscriptions
            WHERE app_id = \(app.id) AND original_transaction_id LIKE \(tag + "-%")
            """
        ).rows
        #expect(rows.count == count)
        #expect(rows.allSatisfy { $0.int("poll_seq") == 1 && $0.date("next_poll_at") == Self.base.addingTimeInterval(3600) })
    }

    /// Queues the jobs, then fails as a scheduler dying before its commit would.
    final class DyingQueue: RepollQueue {
        let inner: any RepollQueue
        init(_ inner: any RepollQueue) { self.inner = inner }
        func acquire(_ wanted: Int, now: Date) throws -> Int { try inner.acquire(wanted, now: now) }
        func enqueue(_ jobs: [JobEnvelope]) throws -> Int {
            _ = try inner.enqueue(jobs)
            throw StoreFailure(code: .driver("crash"), message: "died before the commit")
        }
    }

    @Test("A scheduler that dies between Redis and its commit: the next claim queues nothing twice")
    func crashBetweenRedisAndCommit() throws {
        let tag = "crash-\(UUID().uuidString.prefix(8))"
        try seedDue(40, tag: tag)
        let keys = RedisKeys(prefix: "{rqt-\(UUID().uuidString.prefix(8).lowercased())}")
        let redis = try redis()
        defer { redis.close() }
        let queue = RedisRepollQueue(connection: redis, keys: keys, ratePerSecond: 100_000)
        // Its own app only: other suites share the database (and their subscriptions are due before `base`).
        let schedule = PostgresSubscriptionSchedule(connection: connection, apps: [app.id])
        var rng = SeededGenerator(seed: 1)
        let dying = Repoller(
            schedule: schedule, queue: DyingQueue(queue), batchSize: 1000, lease: .seconds(3600), safetyNet: RepollSafetyNet())
        // receiptq_repolls_due: what is due, bounded by the limit.
        #expect(try dying.countDue(now: Self.base) >= 40)
        #expect(try dying.countDue(now: Self.base, limit: 10) == 10)
        #expect(throws: StoreFailure.self) { try dying.runBatch(now: Self.base, using: &rng) }
        #expect(try dying.countDue(now: Self.base) >= 40, "a rolled-back claim leaves the rows due")
        func length() throws -> Int { try redis.send(["LLEN", keys.queue("repoll")]).int ?? -1 }
        #expect(try length() >= 40)
        let before = try length()
        // The rows were not advanced (rolled back): they are claimed again, and nothing new is queued.
        let queuedAgain = try Repoller(schedule: schedule, queue: queue, batchSize: 1000, lease: .seconds(3600), safetyNet: RepollSafetyNet())
            .drain(now: Self.base, limit: 10_000, using: &rng).queued
        #expect(queuedAgain >= 40)
        #expect(try length() == before)
        #expect(try schedule.countDue(now: Self.base, limit: 1_000_000) == 0, "claimed rows wait for their lease")
        let pending = try connection.query(
            "SELECT count(*) AS n FROM subscriptions WHERE app_id = \(app.id) AND original_transaction_id LIKE \(tag + "-%") AND poll_seq = 0"
        ).rows.first?.int("n")
        #expect(pending == 0)
    }

    @Test("A worker takes re-polls beside a flood of validations (validations first), and all of them once validations run dry")
    func workersServeBothQueues() throws {
        let keys = RedisKeys(prefix: "{rqt-\(UUID().uuidString.prefix(8).lowercased())}")
        let redis = try redis()
        defer { redis.close() }
        func push(_ kind: JobKind, _ count: Int) throws {
            for _ in 0..<count {
                let job = JobEnvelope(id: JobID.make(), appID: app.id, enqueuedAt: Self.base, origin: .api, payload: .sample(kind, receipt: "r"))
                _ = try redis.send(bytes: [Array("LPUSH".utf8), Array(keys.queue(kind.rawValue).utf8), job.encoded()])
            }
        }
        try push(.validate, 300)
        try push(.repoll, 80)
        let queue = RedisWorkQueue(connection: try self.redis(), keys: keys, workerID: "share-\(UUID().uuidString.prefix(6))")
        var kinds: [JobKind] = []
        for _ in 0..<6 { kinds += try queue.reserve(max: 64, timeout: .milliseconds(10)).compactMap(\.envelope?.kind) }
        let validations = kinds.filter { $0 == .validate }.count
        let repolls = kinds.filter { $0 == .repoll }.count
        #expect(repolls > 0, "re-polls starved")
        #expect(validations >= 3 * repolls)
        // A single free slot: the queues take turns.
        let single = try (0..<4).flatMap { _ in try queue.reserve(max: 1, timeout: .milliseconds(10)).compactMap(\.envelope?.kind) }
        #expect(Set(single) == [.validate, .repoll])
        // Validations gone: every slot goes to re-polls.
        _ = try redis.send(["DEL", keys.queue("validate")])
        let rest = try queue.reserve(max: 64, timeout: .milliseconds(10)).compactMap(\.envelope?.kind)
        #expect(!rest.isEmpty && rest.allSatisfy { $0 == .repoll })
    }

    @Test("The global re-poll budget: a backlog is let through at the configured rate, shared by replicas")
    func rateLimit() throws {
        let keys = RedisKeys(prefix: "{rqt-\(UUID().uuidString.prefix(8).lowercased())}")
        let first = RedisRepollQueue(connection: try redis(), keys: keys, ratePerSecond: 10)
        let second = RedisRepollQueue(connection: try redis(), keys: keys, ratePerSecond: 10)
        #expect(try first.acquire(1000, now: Self.base) == 10)
        #expect(try second.acquire(1000, now: Self.base) == 0)
        #expect(try second.acquire(1000, now: Self.base.addingTimeInterval(0.5)) == 5)
        #expect(try first.acquire(1000, now: Self.base.addingTimeInterval(0.5)) == 0)
        // A replica whose clock lags does not take time back.
        #expect(try first.acquire(1000, now: Self.base) == 0)
        // Idle for an hour: the bucket holds one second's worth, not an hour's.
        #expect(try first.acquire(100_000, now: Self.base.addingTimeInterval(3600)) == 10)
    }
}

/// A scheduler's clock that counts how often it is read: the scheduler reads it a few times a tick
/// (retry promotion, the janitor's pace, the re-poll drain, the due count), so a test can tell
/// that it has been round again.
final class CountingClock: Sendable {
    private let clock: MockClock
    private let count = Atomic<Int>(0)

    init(_ clock: MockClock) { self.clock = clock }

    /// More reads than any tick makes (at most six): once the count has grown by this, a whole
    /// tick began and ended since.
    static let readsPerTick = 12

    var reads: Int { count.load(ordering: .sequentiallyConsistent) }

    var closure: @Sendable () -> Date {
        { [self] in
            count.add(1, ordering: .sequentiallyConsistent)
            return clock.now
        }
    }
}
