import Foundation
import Hiredis
import ReceiptCore
import ReceiptTesting
import RedisJobQueue
import Synchronization
import Testing

/// The shared outage circuit against a real Redis: several ``RedisOutageCircuit`` instances, each on
/// its own connection like the lanes of several worker processes, sharing one `{rqt-…}` prefix.
@Suite("Outage circuit on Redis", .enabled(if: TestEnvironment.integrationEnabled))
struct OutageCircuitRedisTests {
    let start = Date(timeIntervalSince1970: 1_700_000_000)

    /// Lanes on one circuit under a prefix unique to the test; `close()` deletes its keys.
    final class Fixture {
        let keys = RedisKeys(prefix: "{rqt-\(UUID().uuidString.prefix(8).lowercased())}")
        let admin: RedisConnection
        private var connections: [RedisConnection] = []

        init() throws {
            admin = try RedisConnection(configuration: Self.configuration)
        }

        static var configuration: RedisConfiguration {
            RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort)
        }

        /// `count` lanes, each with its own connection.
        func lanes(_ count: Int, policy: CircuitPolicy = CircuitPolicy()) throws -> [RedisOutageCircuit] {
            try (0..<count).map { _ in
                let connection = try RedisConnection(configuration: Self.configuration)
                connections.append(connection)
                return RedisOutageCircuit(connection: connection, keys: keys, policy: policy)
            }
        }

        /// The circuit's keys currently in Redis.
        func circuitKeys() throws -> [String] {
            try admin.send(["KEYS", "\(keys.prefix):circuit:*"]).array?.compactMap(\.string).sorted() ?? []
        }

        func close() {
            if let found = try? circuitKeys(), !found.isEmpty { _ = try? admin.send(["DEL"] + found) }
            for connection in connections { connection.close() }
            admin.close()
        }
    }

    /// What the racing threads got; a class, because a `Mutex` cannot be captured by a thread's closure.
    final class Results: Sendable {
        let values = Mutex<[CircuitPermission]>([])
    }

    /// Opens the circuit at `start` with 20 outages spread over the lanes; returns the open-until.
    func open(_ lanes: [RedisOutageCircuit]) throws -> Date {
        var transitions: [CircuitTransition] = []
        for index in 0..<20 {
            if let transition = try lanes[index % lanes.count].record(outage: true, now: start) { transitions.append(transition) }
        }
        #expect(transitions == [.opened(until: start + 10)])
        return start + 10
    }

    @Test("Sporadic failures, a short run, or thinly spread failures never open it")
    func staysClosed() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let workers = try fixture.lanes(4)
        for step in 0..<200 {
            let now = start + Double(step) / 10
            #expect(try workers[step % 4].permission(now: now) == .allow)
            #expect(try workers[step % 4].record(outage: step % 10 == 0, now: now) == nil)
        }
        let later = start + 100
        for index in 0..<19 { #expect(try workers[index % 4].record(outage: true, now: later) == nil) }
        #expect(try workers[0].state(now: later) == .closed)

        let thin = try Fixture()
        defer { thin.close() }
        let thinWorkers = try thin.lanes(2)
        for step in 0..<30 { #expect(try thinWorkers[step % 2].record(outage: true, now: start + Double(step * 2)) == nil) }
        #expect(try thinWorkers[0].state(now: start + 60) == .closed)
    }

    @Test("A run of outages across workers opens it; all are denied while open; bucket keys expire")
    func opensAndDenies() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let workers = try fixture.lanes(4)
        let until = try open(workers)
        for worker in workers {
            #expect(try worker.permission(now: start + 1) == .deny(until: until))
            #expect(try worker.permission(now: until - 0.001) == .deny(until: until))
        }
        #expect(try workers[2].state(now: start + 5) == .open(until: until))
        #expect(try workers[1].record(outage: false, now: start + 2) == nil)
        #expect(try workers[1].record(outage: true, now: start + 2) == nil)
        // A lane that has not seen the opening yet asks Redis and is denied too.
        let newcomer = try fixture.lanes(1)[0]
        #expect(try newcomer.permission(now: start + 3) == .deny(until: until))
        #expect(try newcomer.record(outage: false, now: start + 3) == nil)
        #expect(try workers[3].state(now: start + 3) == .open(until: until))

        let bucket = fixture.keys.circuitCalls(bucket: 1_700_000_000)
        #expect(try fixture.circuitKeys() == [bucket, fixture.keys.circuitState].sorted())
        let ttl = try fixture.admin.send(["PTTL", bucket]).int ?? -1
        #expect(ttl > 0 && ttl <= 61_000)
    }

    @Test("20 threads racing at the end of the open period: exactly one gets the probe")
    func probeRace() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let workers = try fixture.lanes(20)
        let until = try open(workers)
        let results = Results()
        let gate = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        for worker in workers {
            // One thread per lane, as in the worker pool; `nonisolated(unsafe)` because each lane is
            // touched by its own thread only.
            nonisolated(unsafe) let lane = worker
            done.enter()
            Thread.detachNewThread {
                gate.wait()
                let permission = (try? lane.permission(now: until)) ?? .allow
                results.values.withLock { $0.append(permission) }
                done.leave()
            }
        }
        for _ in workers { gate.signal() }
        done.wait()
        let all = results.values.withLock { $0 }
        #expect(all.count == 20)
        #expect(all.filter { $0 == .probe }.count == 1)
        #expect(all.filter { $0 == .deny(until: until + 10) }.count == 19)
        #expect(try workers[0].state(now: until) == .halfOpen)
    }

    @Test("A successful probe closes it for everyone and forgets the outage's window")
    func probeSuccessCloses() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let workers = try fixture.lanes(4)
        let until = try open(workers)
        #expect(try workers[0].permission(now: until) == .probe)
        #expect(try workers[1].permission(now: until + 1) == .deny(until: until + 11))
        #expect(try workers[0].record(outage: false, now: until + 1) == .closed)
        #expect(try fixture.circuitKeys().isEmpty)
        for worker in workers { #expect(try worker.permission(now: until + 1) == .allow) }
        #expect(try workers[1].record(outage: true, now: until + 2) == nil)
        let reopenAt = until + 60
        var transition: CircuitTransition?
        for index in 0..<20 { transition = try workers[index % 4].record(outage: true, now: reopenAt) ?? transition }
        #expect(transition == .opened(until: reopenAt + 10))
    }

    @Test("A failed probe re-opens it for a doubled period, up to five minutes")
    func probeFailureDoubles() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let workers = try fixture.lanes(4)
        var until = try open(workers)
        var periods: [TimeInterval] = []
        for failed in 1...7 {
            let prober = workers[failed % 4]
            #expect(try prober.permission(now: until) == .probe)
            let transition = try prober.record(outage: true, now: until + 0.5)
            guard case .reopened(let next, let count) = transition else {
                Issue.record("expected a re-opening, got \(String(describing: transition))")
                return
            }
            #expect(count == failed)
            periods.append(next.timeIntervalSince(until + 0.5))
            #expect(try workers[(failed + 1) % 4].permission(now: until + 1) == .deny(until: next))
            until = next
        }
        #expect(periods == [20, 40, 80, 160, 300, 300, 300])
    }

    @Test("A prober that never answers loses its lease; its late verdict is ignored")
    func lapsedLease() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let workers = try fixture.lanes(3)
        let until = try open(workers)
        #expect(try workers[0].permission(now: until) == .probe)
        #expect(try workers[1].permission(now: until + 29) == .deny(until: until + 30))
        #expect(try workers[1].permission(now: until + 30) == .probe)
        #expect(try workers[0].record(outage: false, now: until + 31) == nil)
        #expect(try workers[2].state(now: until + 31) == .halfOpen)
        #expect(try workers[1].record(outage: false, now: until + 31) == .closed)
    }

    @Test("Successes dilute outages across workers")
    func successesReset() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let workers = try fixture.lanes(4)
        for index in 0..<19 { try workers[index % 4].record(outage: true, now: start) }
        for index in 0..<10 { try workers[index % 4].record(outage: false, now: start + 1) }
        #expect(try workers[0].record(outage: true, now: start + 2) == nil)
        #expect(try workers[0].state(now: start + 2) == .closed)
        var transition: CircuitTransition?
        for index in 0..<15 { transition = try workers[index % 4].record(outage: true, now: start + 31) ?? transition }
        // 1 outage at +2 and 15 at +31: 16 of 16, short of the minimum; 4 more open it.
        #expect(transition == nil)
        for index in 0..<4 { transition = try workers[index].record(outage: true, now: start + 31) ?? transition }
        #expect(transition == .opened(until: start + 41))
    }

    @Test("A batch of 19 outages and a success stays closed; one more outage, or one bigger batch, opens it")
    func batchOpens() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let workers = try fixture.lanes(4)
        #expect(try workers[0].record(successes: 1, outages: 19, now: start) == nil)
        #expect(try workers[1].state(now: start) == .closed)
        #expect(try workers[1].record(successes: 0, outages: 1, now: start + 1) == .opened(until: start + 11))
        #expect(try workers[2].permission(now: start + 2) == .deny(until: start + 11))

        let fresh = try Fixture()
        defer { fresh.close() }
        let freshWorkers = try fresh.lanes(2)
        #expect(try freshWorkers[1].record(successes: 5, outages: 20, now: start) == .opened(until: start + 10))
        #expect(try freshWorkers[0].permission(now: start + 1) == .deny(until: start + 10))
        let bucket = try fresh.admin.send(["HMGET", fresh.keys.circuitCalls(bucket: 1_700_000_000), "c", "f"])
        #expect(bucket.array?.map(\.string) == ["25", "20"])
    }

    @Test("While open a batch is ignored, the prober's included: only its single verdict closes it")
    func batchIgnoredWhileOpen() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let workers = try fixture.lanes(4)
        let until = try open(workers)
        #expect(try workers[1].record(successes: 500, outages: 0, now: start + 1) == nil)
        // A lane that has not seen the opening asks Redis, which ignores the batch too.
        let newcomer = try fixture.lanes(1)[0]
        #expect(try newcomer.record(successes: 0, outages: 500, now: start + 1) == nil)
        #expect(try workers[3].state(now: start + 1) == .open(until: until))
        #expect(try workers[0].permission(now: until) == .probe)
        #expect(try workers[0].record(successes: 0, outages: 50, now: until + 1) == nil)
        #expect(try workers[0].record(successes: 50, outages: 0, now: until + 1) == nil)
        #expect(try workers[3].state(now: until + 1) == .halfOpen)
        #expect(try workers[3].permission(now: until + 1) == .deny(until: until + 11))
        #expect(try workers[0].record(outage: false, now: until + 2) == .closed)
        #expect(try fixture.circuitKeys().isEmpty)
    }

    @Test("A big batch of successes keeps the ratio below the bar until it slides out; an empty batch does nothing")
    func batchRatio() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let workers = try fixture.lanes(4)
        #expect(try workers[2].record(successes: 0, outages: 0, now: start) == nil)
        #expect(try workers[3].record(successes: -4, outages: 0, now: start) == nil)
        #expect(try fixture.circuitKeys().isEmpty)
        #expect(try workers[0].record(successes: 1000, outages: 0, now: start) == nil)
        #expect(try workers[1].record(successes: 0, outages: 500, now: start + 1) == nil)
        #expect(try workers[2].state(now: start + 2) == .closed)
        #expect(try workers[3].record(successes: 0, outages: 1, now: start + 29) == nil)
        #expect(try workers[3].record(successes: 0, outages: 1, now: start + 30) == .opened(until: start + 40))
    }

    @Test("Random traffic: the Lua script decides exactly as the pure CircuitState does")
    func matchesPureModel() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let policy = CircuitPolicy(
            window: .seconds(5), minimumFailures: 6, failureRatio: 0.7, openDuration: .seconds(2), maximumOpenDuration: .seconds(9),
            probeLease: .seconds(3))
        let workers = try fixture.lanes(4, policy: policy)
        var model = CircuitState()
        var generator = SeededGenerator(seed: 7)
        var now = start
        var seen = Set<String>()
        for step in 0..<1500 {
            now += Double(Int.random(in: 0...400, using: &generator)) / 1000
            let lane = Int.random(in: 0..<4, using: &generator)
            switch Int.random(in: 0..<12, using: &generator) {
            case 0..<4:
                let expected = model.permission(lane: "\(lane)", now: now, policy: policy)
                let actual = try workers[lane].permission(now: now)
                #expect(actual == expected, "step \(step): permission")
                if case .deny = actual { seen.insert("deny") } else { seen.insert("\(actual)") }
            case 4..<9:
                let outage = Int.random(in: 0..<10, using: &generator) < 8
                let expected = model.record(outage: outage, lane: "\(lane)", now: now, policy: policy)
                let actual = try workers[lane].record(outage: outage, now: now)
                #expect(actual == expected, "step \(step): record")
                if let actual { seen.insert("\(actual)".prefix { $0 != "(" }.description) }
            case 9..<11:
                let successes = Int.random(in: 0...5, using: &generator)
                let outages = Int.random(in: 0...6, using: &generator)
                let expected = model.record(successes: successes, outages: outages, lane: "\(lane)", now: now, policy: policy)
                let actual = try workers[lane].record(successes: successes, outages: outages, now: now)
                #expect(actual == expected, "step \(step): batch")
                if actual != nil { seen.insert("batch opened") }
            default:
                #expect(try workers[lane].state(now: now) == model.status(now: now), "step \(step): state")
            }
        }
        // The walk must have exercised the whole machine, not only its closed state.
        #expect(seen == ["allow", "probe", "deny", "opened", "reopened", "closed", "batch opened"])
    }
}
