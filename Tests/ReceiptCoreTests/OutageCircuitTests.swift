import Dispatch
import Foundation
import ReceiptCore
import ReceiptTesting
import Synchronization
import Testing

/// The outage circuit's rules (``CircuitPolicy``, ``CircuitState``) through ``MemoryOutageCircuit``,
/// with several instances sharing one state as the lanes of several workers share Redis.
@Suite("Outage circuit: policy and in-memory circuit")
struct OutageCircuitTests {
    let start = Date(timeIntervalSince1970: 1_700_000_000)

    /// Four lanes ("workers") on one circuit with the default policy.
    func lanes(_ count: Int = 4, policy: CircuitPolicy = CircuitPolicy()) -> [MemoryOutageCircuit] {
        let first = MemoryOutageCircuit(policy: policy)
        return [first] + (1..<count).map { _ in first.sharingLane() }
    }

    /// Opens the circuit at `start` with 20 outages spread over the lanes; returns the open-until.
    func open(_ lanes: [MemoryOutageCircuit]) throws -> Date {
        var transitions: [CircuitTransition] = []
        for index in 0..<20 {
            if let transition = try lanes[index % lanes.count].record(outage: true, now: start) { transitions.append(transition) }
        }
        #expect(transitions == [.opened(until: start + 10)])
        return start + 10
    }

    @Test("Defaults, clamping, and the doubling open period")
    func policy() {
        let policy = CircuitPolicy()
        #expect(policy.window == .seconds(30))
        #expect(policy.minimumFailures == 20)
        #expect(policy.failureRatio == 0.8)
        #expect(policy.bucketCount == 30)
        #expect(policy.bucketIndex(at: start + 0.999) == 1_700_000_000)
        #expect(policy.bucketIndex(at: Date(timeIntervalSince1970: -0.5)) == -1)
        #expect((0...7).map { policy.openPeriod(afterFailedProbes: $0) } == [10, 20, 40, 80, 160, 300, 300, 300].map { .seconds($0) })
        #expect(policy.openPeriod(afterFailedProbes: 5000) == .seconds(300))
        #expect(policy.shouldOpen(calls: 20, failures: 20))
        #expect(policy.shouldOpen(calls: 25, failures: 20))
        #expect(!policy.shouldOpen(calls: 19, failures: 19))
        #expect(!policy.shouldOpen(calls: 26, failures: 20))

        let odd = CircuitPolicy(window: .seconds(100_000), minimumFailures: 0, failureRatio: .nan, openDuration: .zero)
        #expect(odd.bucketCount == 300)
        #expect(odd.minimumFailures == 1)
        #expect(odd.failureRatio == 1)
        #expect(odd.openDuration == .milliseconds(1))
    }

    @Test("Sporadic failures, a short run, or failures spread thinly over time never open it")
    func staysClosed() throws {
        let workers = lanes()
        // 10% outages across four workers for 50 s.
        for step in 0..<500 {
            let now = start + Double(step) / 10
            #expect(try workers[step % 4].permission(now: now) == .allow)
            #expect(try workers[step % 4].record(outage: step % 10 == 0, now: now) == nil)
        }
        // 19 outages in a row: one short of the minimum.
        let later = start + 100
        for index in 0..<19 { #expect(try workers[index % 4].record(outage: true, now: later) == nil) }
        // One outage every 2 s for a minute: never 20 inside a 30 s window.
        let thin = lanes()
        for step in 0..<30 { #expect(try thin[step % 4].record(outage: true, now: start + Double(step * 2)) == nil) }
        #expect(try workers[0].state(now: later) == .closed)
        #expect(try thin[0].state(now: start + 60) == .closed)
    }

    @Test("A run of outages across workers opens it, and every worker is denied while it is open")
    func opensAndDenies() throws {
        let workers = lanes()
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
    }

    @Test("After the open period exactly one worker probes; the others wait for its verdict")
    func singleProbe() throws {
        let workers = lanes()
        let until = try open(workers)
        #expect(try workers[0].state(now: until) == .halfOpen)
        #expect(try workers[1].permission(now: until) == .probe)
        for worker in [workers[0], workers[2], workers[3]] {
            // Back after one base open period (10 s), well before the 30 s lease runs out.
            #expect(try worker.permission(now: until + 1) == .deny(until: until + 11))
        }
        #expect(try workers[0].state(now: until + 1) == .halfOpen)
    }

    @Test("Threads racing at the end of the open period: exactly one probe")
    func probeRace() throws {
        let first = MemoryOutageCircuit()
        let workers = [first] + (1..<20).map { _ in first.sharingLane() }
        let until = try open(workers)
        let probes = Atomic(0)
        DispatchQueue.concurrentPerform(iterations: workers.count) { index in
            if (try? workers[index].permission(now: until)) == .probe { probes.add(1, ordering: .relaxed) }
        }
        #expect(probes.load(ordering: .relaxed) == 1)
    }

    @Test("A successful probe closes it, forgets the outage's window, and resets the backoff")
    func probeSuccessCloses() throws {
        let workers = lanes()
        let until = try open(workers)
        #expect(try workers[0].permission(now: until) == .probe)
        #expect(try workers[0].record(outage: false, now: until + 1) == .closed)
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

    @Test("A failed probe re-opens it for a doubled period, up to five minutes")
    func probeFailureDoubles() throws {
        let workers = lanes()
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
            #expect(try workers[0].permission(now: until + 1) == .deny(until: next))
            until = next
        }
        #expect(periods == [20, 40, 80, 160, 300, 300, 300])
    }

    @Test("A prober that never answers loses its lease; its late verdict is ignored")
    func lapsedLease() throws {
        let workers = lanes()
        let until = try open(workers)
        #expect(try workers[0].permission(now: until) == .probe)
        #expect(try workers[1].permission(now: until + 29) == .deny(until: until + 30))
        #expect(try workers[1].permission(now: until + 30) == .probe)
        #expect(try workers[0].record(outage: false, now: until + 31) == nil)
        #expect(try workers[2].state(now: until + 31) == .halfOpen)
        #expect(try workers[1].record(outage: false, now: until + 31) == .closed)
    }

    @Test("Successes dilute outages: a long run of them keeps the ratio below 80%")
    func successesReset() throws {
        let workers = lanes()
        for index in 0..<19 { try workers[index % 4].record(outage: true, now: start) }
        for index in 0..<10 { try workers[index % 4].record(outage: false, now: start + 1) }
        // 20 outages of 30 calls: 67%.
        #expect(try workers[0].record(outage: true, now: start + 2) == nil)
        #expect(try workers[0].state(now: start + 2) == .closed)
        // Once the successes slide out of the window, outages dominate again: 4 more make 24 of 34.
        // (The outages at `start` and `start + 2` are still inside the window at `start + 29`.)
        for index in 0..<3 { #expect(try workers[index].record(outage: true, now: start + 29) == nil) }
        #expect(try workers[3].record(outage: true, now: start + 29) == nil)
        // At `start + 31` the first two seconds (19 outages, 10 successes) have slid out: 5 outages
        // remain, and 15 more make 20 of 20.
        var transition: CircuitTransition?
        for index in 0..<15 { transition = try workers[index % 4].record(outage: true, now: start + 31) ?? transition }
        #expect(transition == .opened(until: start + 41))
    }

    @Test("A batch of 19 outages and a success stays closed; one more outage, or one bigger batch, opens it")
    func batchOpens() throws {
        let workers = lanes()
        #expect(try workers[0].record(successes: 1, outages: 19, now: start) == nil)
        #expect(try workers[1].state(now: start) == .closed)
        // 20 outages of 21 calls.
        #expect(try workers[1].record(successes: 0, outages: 1, now: start + 1) == .opened(until: start + 11))
        #expect(try workers[2].permission(now: start + 2) == .deny(until: start + 11))

        let fresh = lanes()
        // 20 outages of 25 calls: exactly the 80% bar.
        #expect(try fresh[2].record(successes: 5, outages: 20, now: start) == .opened(until: start + 10))
        #expect(try fresh[0].permission(now: start + 1) == .deny(until: start + 10))
    }

    @Test("While open a batch is ignored, the prober's included: only its single verdict closes it")
    func batchIgnoredWhileOpen() throws {
        let workers = lanes()
        let until = try open(workers)
        #expect(try workers[1].record(successes: 500, outages: 0, now: start + 1) == nil)
        #expect(try workers[2].record(successes: 0, outages: 500, now: start + 1) == nil)
        #expect(try workers[3].state(now: start + 1) == .open(until: until))
        #expect(try workers[0].permission(now: until) == .probe)
        // The prober's other calls were in flight when it opened: their batch is no verdict.
        #expect(try workers[0].record(successes: 0, outages: 50, now: until + 1) == nil)
        #expect(try workers[0].record(successes: 50, outages: 0, now: until + 1) == nil)
        #expect(try workers[3].state(now: until + 1) == .halfOpen)
        #expect(try workers[3].permission(now: until + 1) == .deny(until: until + 11))
        #expect(try workers[0].record(outage: false, now: until + 2) == .closed)
    }

    @Test("A big batch of successes keeps the ratio below the bar until it slides out; an empty batch does nothing")
    func batchRatio() throws {
        let workers = lanes()
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

    @Test("A batch decides as its outcomes recorded one by one, outages last")
    func batchMatchesSingles() {
        let policy = CircuitPolicy(window: .seconds(5), minimumFailures: 6, failureRatio: 0.7)
        var generator = SeededGenerator(seed: 11)
        var opened = 0
        for scenario in 0..<200 {
            var batched = CircuitState()
            var single = CircuitState()
            var now = start
            for step in 0..<20 {
                now += Double(Int.random(in: 0...1500, using: &generator)) / 1000
                let successes = Int.random(in: 0...4, using: &generator)
                let outages = Int.random(in: 0...10, using: &generator)
                let expected =
                    ((0..<successes).map { _ in false } + (0..<outages).map { _ in true })
                    .compactMap { single.record(outage: $0, lane: "a", now: now, policy: policy) }
                let actual = batched.record(successes: successes, outages: outages, lane: "a", now: now, policy: policy)
                #expect(expected.count <= 1, "scenario \(scenario) step \(step): singles")
                #expect(actual == expected.first, "scenario \(scenario) step \(step): transition")
                #expect(batched.status(now: now) == single.status(now: now), "scenario \(scenario) step \(step): status")
                if actual != nil { opened += 1 }
            }
        }
        // Most scenarios must have opened, or the comparison says little.
        #expect(opened > 100)
    }

    @Test("The pure state: a lane that asks twice keeps its probe; status names are bounded")
    func pureState() {
        let policy = CircuitPolicy(minimumFailures: 1, failureRatio: 1)
        var state = CircuitState()
        #expect(state.record(outage: true, lane: "a", now: start, policy: policy) == .opened(until: start + 10))
        #expect(state.permission(lane: "a", now: start + 10, policy: policy) == .probe)
        #expect(state.permission(lane: "a", now: start + 11, policy: policy) == .probe)
        #expect(state.permission(lane: "b", now: start + 11, policy: policy) == .deny(until: start + 21))
        #expect(state.record(outage: true, lane: "a", now: start + 12, policy: policy) == .reopened(until: start + 32, failedProbes: 1))
        #expect(state.failedProbes == 1)
        #expect(state.record(successes: 0, outages: 3, lane: "a", now: start + 33, policy: policy) == nil)
        #expect(state.status(now: start + 33) == .halfOpen)

        var empty = CircuitState()
        #expect(empty.record(successes: 0, outages: 0, lane: "a", now: start, policy: policy) == nil)
        #expect(empty.record(successes: -2, outages: -1, lane: "a", now: start, policy: policy) == nil)
        #expect(empty == CircuitState())
        #expect(empty.record(successes: -2, outages: 1, lane: "a", now: start, policy: policy) == .opened(until: start + 10))
        #expect([CircuitStatus.closed, .open(until: start), .halfOpen].map(\.name) == ["closed", "open", "half_open"])
    }
}
