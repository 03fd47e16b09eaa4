import Foundation
import Hiredis
import ReceiptCore
import ReceiptTesting
import RedisJobQueue
import Synchronization
import SystemTesting
import Testing

/// The outage circuit's contract, run over every implementation (``CircuitImplementation``): the
/// memory double the worker's tests use and production's Redis circuit must decide alike, with
/// several lanes sharing one circuit as the lanes of several worker processes do.
@Suite("Outage circuit: the contract of every implementation", .blockingWork)
struct OutageCircuitContractTests {
    let start = Date(timeIntervalSince1970: 1_700_000_000)

    /// What the racing threads got; a class, because a `Mutex` cannot be captured by a thread's closure.
    final class Results: Sendable {
        let values = Mutex<[CircuitPermission]>([])
    }

    /// Opens the circuit at `start` with 20 outages spread over the lanes; returns the open-until.
    func open(_ lanes: [any OutageCircuit]) throws -> Date {
        var transitions: [CircuitTransition] = []
        for index in 0..<20 {
            if let transition = try lanes[index % lanes.count].record(outage: true, now: start) { transitions.append(transition) }
        }
        #expect(transitions == [.opened(until: start + 10)])
        return start + 10
    }

    /// Runs `body` on a new, closed circuit of `implementation` with `count` lanes, and releases the
    /// circuit after.
    func withLanes(
        _ implementation: CircuitImplementation, _ count: Int = 4, policy: CircuitPolicy = CircuitPolicy(),
        _ body: (_ circuit: any SharedCircuit, _ workers: [any OutageCircuit]) throws -> Void
    ) throws {
        let circuit = try implementation.circuit(policy: policy)
        defer { circuit.close() }
        try body(circuit, try circuit.lanes(count))
    }

    @Test("Sporadic failures, a short run, or failures spread thinly over time never open it", arguments: CircuitImplementation.available)
    func staysClosed(_ implementation: CircuitImplementation) throws {
        try withLanes(implementation) { _, workers throws in
            // 10% outages across four workers for 50 s.
            for step in 0..<500 {
                let now = start + Double(step) / 10
                #expect(try workers[step % 4].permission(now: now) == .allow)
                #expect(try workers[step % 4].record(outage: step % 10 == 0, now: now) == nil)
            }
            // 19 outages in a row: one short of the minimum.
            let later = start + 100
            for index in 0..<19 { #expect(try workers[index % 4].record(outage: true, now: later) == nil) }
            #expect(try workers[0].state(now: later) == .closed)
        }
        try withLanes(implementation) { _, workers throws in
            // One outage every 2 s for a minute: never 20 inside a 30 s window.
            for step in 0..<30 { #expect(try workers[step % 4].record(outage: true, now: start + Double(step * 2)) == nil) }
            #expect(try workers[0].state(now: start + 60) == .closed)
        }
    }

    @Test("A run of outages across workers opens it, and every worker is denied while it is open", arguments: CircuitImplementation.available)
    func opensAndDenies(_ implementation: CircuitImplementation) throws {
        try withLanes(implementation) { circuit, workers throws in
            let until = try open(workers)
            for worker in workers {
                #expect(try worker.permission(now: start + 1) == .deny(until: until))
                #expect(try worker.permission(now: until - 0.001) == .deny(until: until))
            }
            #expect(try workers[2].state(now: start + 5) == .open(until: until))
            // Late verdicts of calls that were in flight change nothing, successes included.
            #expect(try workers[1].record(outage: false, now: start + 2) == nil)
            #expect(try workers[1].record(outage: true, now: start + 2) == nil)
            #expect(try workers[3].permission(now: start + 3) == .deny(until: until))
            // A lane that has not seen the opening yet is denied too, and its late verdict changes nothing.
            let newcomer = try circuit.lane()
            #expect(try newcomer.permission(now: start + 3) == .deny(until: until))
            #expect(try newcomer.record(outage: false, now: start + 3) == nil)
            #expect(try workers[3].state(now: start + 3) == .open(until: until))
        }
    }

    @Test("After the open period exactly one worker probes; the others wait for its verdict", arguments: CircuitImplementation.available)
    func singleProbe(_ implementation: CircuitImplementation) throws {
        try withLanes(implementation) { _, workers throws in
            let until = try open(workers)
            #expect(try workers[0].state(now: until) == .halfOpen)
            #expect(try workers[1].permission(now: until) == .probe)
            for worker in [workers[0], workers[2], workers[3]] {
                // Back after one base open period (10 s), well before the 30 s lease runs out.
                #expect(try worker.permission(now: until + 1) == .deny(until: until + 11))
            }
            #expect(try workers[0].state(now: until + 1) == .halfOpen)
        }
    }

    @Test("20 threads racing at the end of the open period: exactly one gets the probe", arguments: CircuitImplementation.available)
    func probeRace(_ implementation: CircuitImplementation) throws {
        try withLanes(implementation, 20) { _, workers throws in
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
    }

    @Test(
        "A successful probe closes it for everyone, forgets the outage's window, and resets the backoff", arguments: CircuitImplementation.available)
    func probeSuccessCloses(_ implementation: CircuitImplementation) throws {
        try withLanes(implementation) { circuit, workers throws in
            let until = try open(workers)
            #expect(try workers[0].permission(now: until) == .probe)
            #expect(try workers[1].permission(now: until + 1) == .deny(until: until + 11))
            #expect(try workers[0].record(outage: false, now: until + 1) == .closed)
            #expect(try circuit.isEmpty())
            for worker in workers { #expect(try worker.permission(now: until + 1) == .allow) }
            #expect(try workers[1].state(now: until + 1) == .closed)
            // The 20 outages are still inside 30 s, but were forgotten: one more opens nothing.
            #expect(try workers[1].record(outage: true, now: until + 2) == nil)
            // The next outage opens for the base period again, not a doubled one.
            let reopenAt = until + 60
            var transition: CircuitTransition?
            for index in 0..<20 { transition = try workers[index % 4].record(outage: true, now: reopenAt) ?? transition }
            #expect(transition == .opened(until: reopenAt + 10))
        }
    }

    @Test("A failed probe re-opens it for a doubled period, up to five minutes", arguments: CircuitImplementation.available)
    func probeFailureDoubles(_ implementation: CircuitImplementation) throws {
        try withLanes(implementation) { _, workers throws in
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
                // Every lane is denied, the one that probed (every fourth round, lane 0) included.
                #expect(try workers[0].permission(now: until + 1) == .deny(until: next))
                #expect(try workers[(failed + 1) % 4].permission(now: until + 1) == .deny(until: next))
                until = next
            }
            #expect(periods == [20, 40, 80, 160, 300, 300, 300])
        }
    }

    @Test("A prober that never answers loses its lease; its late verdict is ignored", arguments: CircuitImplementation.available)
    func lapsedLease(_ implementation: CircuitImplementation) throws {
        try withLanes(implementation) { _, workers throws in
            let until = try open(workers)
            #expect(try workers[0].permission(now: until) == .probe)
            #expect(try workers[1].permission(now: until + 29) == .deny(until: until + 30))
            #expect(try workers[1].permission(now: until + 30) == .probe)
            #expect(try workers[0].record(outage: false, now: until + 31) == nil)
            #expect(try workers[2].state(now: until + 31) == .halfOpen)
            #expect(try workers[1].record(outage: false, now: until + 31) == .closed)
        }
    }

    @Test("Successes dilute outages: a long run of them keeps the ratio below 80% until it slides out", arguments: CircuitImplementation.available)
    func successesDilute(_ implementation: CircuitImplementation) throws {
        /// 19 outages at `start`, 10 successes at `start + 1`: one more outage makes 20 of 30 (67%).
        func diluted(then rest: ([any OutageCircuit]) throws -> Void) throws {
            try withLanes(implementation) { _, workers throws in
                for index in 0..<19 { try workers[index % 4].record(outage: true, now: start) }
                for index in 0..<10 { try workers[index % 4].record(outage: false, now: start + 1) }
                #expect(try workers[0].record(outage: true, now: start + 2) == nil)
                #expect(try workers[0].state(now: start + 2) == .closed)
                try rest(workers)
            }
        }
        // Once the successes slide out of the window, outages dominate again: 4 more at `start + 29`
        // make 24 of 34. At `start + 31` the first two seconds (19 outages, 10 successes) have slid
        // out: 5 outages remain, and 15 more make 20 of 20.
        try diluted { workers throws in
            for index in 0..<3 { #expect(try workers[index].record(outage: true, now: start + 29) == nil) }
            #expect(try workers[3].record(outage: true, now: start + 29) == nil)
            var transition: CircuitTransition?
            for index in 0..<15 { transition = try workers[index % 4].record(outage: true, now: start + 31) ?? transition }
            #expect(transition == .opened(until: start + 41))
        }
        // Without the outages at `start + 29`: 1 outage at `start + 2` and 15 at `start + 31` are
        // 16 of 16, short of the minimum; 4 more open it.
        try diluted { workers throws in
            var transition: CircuitTransition?
            for index in 0..<15 { transition = try workers[index % 4].record(outage: true, now: start + 31) ?? transition }
            #expect(transition == nil)
            for index in 0..<4 { transition = try workers[index].record(outage: true, now: start + 31) ?? transition }
            #expect(transition == .opened(until: start + 41))
        }
    }

    @Test(
        "A batch of 19 outages and a success stays closed; one more outage, or one bigger batch, opens it",
        arguments: CircuitImplementation.available)
    func batchOpens(_ implementation: CircuitImplementation) throws {
        try withLanes(implementation) { _, workers throws in
            #expect(try workers[0].record(successes: 1, outages: 19, now: start) == nil)
            #expect(try workers[1].state(now: start) == .closed)
            // 20 outages of 21 calls.
            #expect(try workers[1].record(successes: 0, outages: 1, now: start + 1) == .opened(until: start + 11))
            #expect(try workers[2].permission(now: start + 2) == .deny(until: start + 11))
        }
        try withLanes(implementation) { _, workers throws in
            // 20 outages of 26 calls, then 21 of 27: short of the 80% bar.
            #expect(try workers[0].record(successes: 6, outages: 20, now: start) == nil)
            #expect(try workers[1].record(successes: 0, outages: 1, now: start) == nil)
            #expect(try workers[0].state(now: start) == .closed)
        }
        try withLanes(implementation) { circuit, workers throws in
            // 20 outages of 25 calls: exactly the 80% bar.
            #expect(try workers[2].record(successes: 5, outages: 20, now: start) == .opened(until: start + 10))
            #expect(try workers[0].permission(now: start + 1) == .deny(until: start + 10))
            let counts = try circuit.counts(inBucket: 1_700_000_000)
            #expect(counts.calls == 25 && counts.failures == 20)
        }
    }

    @Test("While open a batch is ignored, the prober's included: only its single verdict closes it", arguments: CircuitImplementation.available)
    func batchIgnoredWhileOpen(_ implementation: CircuitImplementation) throws {
        try withLanes(implementation) { circuit, workers throws in
            let until = try open(workers)
            #expect(try workers[1].record(successes: 500, outages: 0, now: start + 1) == nil)
            #expect(try workers[2].record(successes: 0, outages: 500, now: start + 1) == nil)
            // A lane that has not seen the opening ignores a batch too.
            let newcomer = try circuit.lane()
            #expect(try newcomer.record(successes: 0, outages: 500, now: start + 1) == nil)
            #expect(try workers[3].state(now: start + 1) == .open(until: until))
            #expect(try workers[0].permission(now: until) == .probe)
            // The prober's other calls were in flight when it opened: their batch is no verdict.
            #expect(try workers[0].record(successes: 0, outages: 50, now: until + 1) == nil)
            #expect(try workers[0].record(successes: 50, outages: 0, now: until + 1) == nil)
            #expect(try workers[3].state(now: until + 1) == .halfOpen)
            #expect(try workers[3].permission(now: until + 1) == .deny(until: until + 11))
            #expect(try workers[0].record(outage: false, now: until + 2) == .closed)
            #expect(try circuit.isEmpty())
        }
    }

    @Test(
        "A big batch of successes keeps the ratio below the bar until it slides out; an empty batch does nothing",
        arguments: CircuitImplementation.available)
    func batchRatio(_ implementation: CircuitImplementation) throws {
        try withLanes(implementation) { circuit, workers throws in
            #expect(try workers[2].record(successes: 0, outages: 0, now: start) == nil)
            #expect(try workers[3].record(successes: -4, outages: 0, now: start) == nil)
            #expect(try circuit.isEmpty())
            #expect(try workers[0].record(successes: 1000, outages: 0, now: start) == nil)
            // 500 outages of 1,500 calls: a third.
            #expect(try workers[1].record(successes: 0, outages: 500, now: start + 1) == nil)
            #expect(try workers[2].record(successes: 0, outages: 0, now: start + 2) == nil)
            #expect(try workers[3].record(successes: -4, outages: 0, now: start + 2) == nil)
            #expect(try workers[2].state(now: start + 2) == .closed)
            #expect(try workers[3].record(successes: 0, outages: 1, now: start + 29) == nil)
            // At `start + 30` the successes' bucket has slid out: 502 outages of 502 calls.
            #expect(try workers[3].record(successes: 0, outages: 1, now: start + 30) == .opened(until: start + 40))
        }
    }

    @Test("Random traffic: every implementation decides exactly as the memory double's pure model", arguments: CircuitImplementation.available)
    func matchesModel(_ implementation: CircuitImplementation) throws {
        let policy = CircuitPolicy(
            window: .seconds(5), minimumFailures: 6, failureRatio: 0.7, openDuration: .seconds(2), maximumOpenDuration: .seconds(9),
            probeLease: .seconds(3))
        try withLanes(implementation, policy: policy) { _, workers throws in
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

    @Test("On Redis an open circuit is its state hash and the bucket, and the bucket expires", .enabled(if: TestEnvironment.integrationEnabled))
    func redisStorage() throws {
        let circuit = try RedisSharedCircuit(policy: CircuitPolicy())
        defer { circuit.close() }
        _ = try open(circuit.lanes(4))
        let bucket = circuit.keys.circuitCalls(bucket: 1_700_000_000)
        #expect(try circuit.circuitKeys() == [bucket, circuit.keys.circuitState].sorted())
        let ttl = try circuit.admin.send(["PTTL", bucket]).int ?? -1
        #expect(ttl > 0 && ttl <= 61_000)
    }
}
