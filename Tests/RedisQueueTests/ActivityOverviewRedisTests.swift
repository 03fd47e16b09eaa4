import Foundation
import Hiredis
import ReceiptCore
import ReceiptTesting
import RedisJobQueue
import SystemTesting
import Testing

/// The per-minute activity the workers count when they settle, and the overview that reads it back
/// with the outage circuit, against a real Redis under a `{rqt-…}` prefix unique to each test.
@Suite("Activity counters and the circuit in the queue overview", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct ActivityOverviewRedisTests {
    /// A connection, a pool and a prefix for one test; `close()` deletes every key under the prefix.
    final class Fixture {
        let keys = RedisKeys(prefix: "{rqt-\(UUID().uuidString.prefix(8).lowercased())}")
        let admin: RedisConnection
        let pool = RedisConnectionPool(configuration: Fixture.configuration, size: 2)
        private var connections: [RedisConnection] = []

        init() throws { admin = try RedisConnection(configuration: Self.configuration) }

        static var configuration: RedisConfiguration {
            RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort)
        }

        /// A new connection of its own, as each worker thread and each circuit lane has.
        func connection() throws -> RedisConnection {
            let connection = try RedisConnection(configuration: Self.configuration)
            connections.append(connection)
            return connection
        }

        func overview(at now: Date) -> RedisQueueOverview { RedisQueueOverview(pool: pool, keys: keys, now: { now }) }

        /// The activity hashes in Redis, by minute.
        func activityMinutes() throws -> [Int64] {
            let found = try admin.send(["KEYS", "\(keys.prefix):stats:*"]).array?.compactMap(\.string) ?? []
            return found.compactMap { $0.split(separator: ":").last.flatMap { Int64($0) } }.sorted()
        }

        func hash(_ key: String) throws -> [String: String] {
            let fields = try admin.send(["HGETALL", key]).array?.compactMap(\.string) ?? []
            return Dictionary(uniqueKeysWithValues: stride(from: 0, to: fields.count - 1, by: 2).map { (fields[$0], fields[$0 + 1]) })
        }

        func close() {
            if let found = try? admin.send(["KEYS", "\(keys.prefix):*"]).array?.compactMap(\.string), !found.isEmpty {
                _ = try? admin.send(["DEL"] + found)
            }
            for connection in connections { connection.close() }
            pool.close()
            admin.close()
        }
    }

    func envelope() -> JobEnvelope {
        JobEnvelope(
            id: JobID.make(), appID: UUID(), enqueuedAt: Date(), origin: .api,
            payload: .receipt(ReceiptJob(receipt: "MIIActivity", bundleID: "com.example.activity")))
    }

    /// Queues `count` jobs and takes them as a worker does, into its processing list.
    func reserve(_ count: Int, on queue: RedisWorkQueue, fixture: Fixture) throws -> [ReservedJob] {
        for _ in 0..<count {
            _ = try fixture.admin.send(bytes: [Array("LPUSH".utf8), Array(fixture.keys.queue("validate").utf8), envelope().encoded()])
        }
        // A reserve shares its moves between the queues, so it may take several to get them all.
        var jobs: [ReservedJob] = []
        for _ in 0..<count where jobs.count < count {
            jobs += try queue.reserve(max: count - jobs.count, timeout: .milliseconds(100))
        }
        #expect(jobs.count == count)
        return jobs
    }

    static func minute(of date: Date) -> Int64 { Int64((date.timeIntervalSince1970 / 60).rounded(.down)) }

    @Test("A settle with a tally adds it to the current minute's hash, in the same transaction, with a TTL")
    func settleCounts() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let queue = RedisWorkQueue(connection: try fixture.connection(), keys: fixture.keys, workerID: "activity-test")
        let jobs = try reserve(3, on: queue, fixture: fixture)
        let before = Self.minute(of: Date())

        // Without a tally (the protocol extension), nothing is counted and no key is made.
        try queue.settle([.acknowledge(jobs[0], result: nil)])
        #expect(try fixture.activityMinutes() == [])

        var failed = try #require(jobs[1].envelope)
        failed = failed.failed(code: .transport(.timeout), message: "no answer", calls: [], at: Date())
        var first = ActivityTally()
        first.add(.validated)
        try queue.settle([.acknowledge(jobs[2], result: nil)], activity: first)
        var second = ActivityTally()
        second.add(.retried, failure: failed.errorCode)
        try queue.settle([.retry(jobs[1], updated: failed, runAt: Date().addingTimeInterval(60))], activity: second)
        let after = Self.minute(of: Date())

        let minutes = try fixture.activityMinutes()
        #expect(!minutes.isEmpty && minutes.allSatisfy { (before...after).contains($0) })
        // Summed over the (at most two) minutes the settles ran in: only counts that happened are fields.
        var totals: [String: Int] = [:]
        for minute in minutes {
            let key = fixture.keys.activity(minute: minute)
            for (field, value) in try fixture.hash(key) { totals[field, default: 0] += Int(value) ?? -1 }
            let ttl = try #require(try fixture.admin.send(["TTL", key]).int)
            #expect(ttl > 7_000 && ttl <= 7_200)
        }
        #expect(totals == ["o.validated": 1, "o.retried": 1, "f.network": 1])
        // The moves happened alongside the counts.
        #expect(try fixture.admin.send(["LLEN", fixture.keys.processing("activity-test")]).int == 0)
        #expect(try fixture.admin.send(["ZCARD", fixture.keys.retry]).int == 1)
    }

    @Test("The overview holds the last 60 minutes, oldest first, zero where nothing was counted")
    func overviewActivity() async throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let queue = RedisWorkQueue(connection: try fixture.connection(), keys: fixture.keys, workerID: "activity-overview")
        let jobs = try reserve(2, on: queue, fixture: fixture)
        var tally = ActivityTally()
        tally.add(.validated)
        tally.add(.dead, failure: .sharedSecretMismatch)
        let buried = try #require(jobs[1].envelope).failed(code: .sharedSecretMismatch, message: "21004", calls: [], at: Date())
        try queue.settle([.acknowledge(jobs[0], result: nil), .bury(jobs[1], updated: buried, at: Date())], activity: tally)
        let written = try #require(try fixture.activityMinutes().first)
        // Seen from 30 s into that minute, and from the next one.
        let start = Date(timeIntervalSince1970: Double(written) * 60)

        let snapshot = try await fixture.overview(at: start.addingTimeInterval(30)).snapshot()
        #expect(snapshot.activity.count == 60)
        #expect(snapshot.activity.last?.minute == start)
        #expect(snapshot.activity.first?.minute == start.addingTimeInterval(-59 * 60))
        #expect(zip(snapshot.activity, snapshot.activity.dropFirst()).allSatisfy { $1.minute.timeIntervalSince($0.minute) == 60 })
        #expect(snapshot.activity.last?.tally == ActivityTally(outcomes: [.validated: 1, .dead: 1], failures: [.configuration: 1]))
        #expect(snapshot.activity.dropLast().allSatisfy { $0.tally.isEmpty })
        #expect(snapshot.dead == 1)

        let later = try await fixture.overview(at: start.addingTimeInterval(90)).snapshot()
        #expect(later.activity.count == 60)
        #expect(later.activity.last?.tally.isEmpty == true)
        #expect(later.activity[58].tally.outcomes[.validated] == 1)
        // An hour on, the minute has left the window (it is still in Redis until its TTL).
        let hourLater = try await fixture.overview(at: start.addingTimeInterval(3_630)).snapshot()
        #expect(hourLater.activity.allSatisfy { $0.tally.isEmpty })
    }

    @Test("The circuit: closed, then open until its end, then half-open once the clock passes it")
    func circuit() async throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let start = Date(timeIntervalSince1970: 1_700_000_000)
        #expect(try await fixture.overview(at: start).snapshot().circuit == CircuitSnapshot(status: .closed))

        // A run of outages opens it for the base period (10 s by default).
        let lane = RedisOutageCircuit(connection: try fixture.connection(), keys: fixture.keys)
        var transitions: [CircuitTransition] = []
        for _ in 0..<20 {
            if let transition = try lane.record(outage: true, now: start) { transitions.append(transition) }
        }
        #expect(transitions == [.opened(until: start + 10)])
        #expect(try await fixture.overview(at: start + 1).snapshot().circuit == CircuitSnapshot(status: .open(until: start + 10)))
        #expect(try await fixture.overview(at: start + 11).snapshot().circuit == CircuitSnapshot(status: .halfOpen))
        // The overview says what the circuit itself says.
        #expect(try lane.state(now: start + 11) == .halfOpen)

        // A failed probe re-opens it for twice as long, and the count shows.
        #expect(try lane.permission(now: start + 11) == .probe)
        #expect(try lane.record(outage: true, now: start + 11) == .reopened(until: start + 31, failedProbes: 1))
        #expect(
            try await fixture.overview(at: start + 12).snapshot().circuit == CircuitSnapshot(status: .open(until: start + 31), failedProbes: 1))
        #expect(try await fixture.overview(at: start + 31).snapshot().circuit == CircuitSnapshot(status: .halfOpen, failedProbes: 1))

        // A probe Apple answers closes it, and the overview forgets the failed probes.
        #expect(try lane.permission(now: start + 32) == .probe)
        #expect(try lane.record(outage: false, now: start + 32) == .closed)
        #expect(try await fixture.overview(at: start + 33).snapshot().circuit == CircuitSnapshot(status: .closed))
    }

    @Test("An operator's hand-written state hash is read the same way (open_until in ms)")
    func handWrittenState() async throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let until = Date(timeIntervalSince1970: 1_700_000_600)
        _ = try fixture.admin.send(["HSET", fixture.keys.circuitState, "open_until", "1700000600000", "failed_probes", "3"])
        #expect(
            try await fixture.overview(at: until - 0.001).snapshot().circuit == CircuitSnapshot(status: .open(until: until), failedProbes: 3))
        #expect(try await fixture.overview(at: until).snapshot().circuit == CircuitSnapshot(status: .halfOpen, failedProbes: 3))
    }
}
