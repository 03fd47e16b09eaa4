import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

/// The circuit's policy (production) and the pure model the memory double runs (``CircuitState``):
/// what no lane can observe through `OutageCircuit`. The behaviour every implementation must show
/// is the contract suite's (`OutageCircuitContractTests`, over the memory and the Redis circuit).
@Suite("Outage circuit: policy and the memory double's model")
struct OutageCircuitModelTests {
    let start = Date(timeIntervalSince1970: 1_700_000_000)

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
