import Foundation
import ReceiptCore
import Synchronization

/// The circuit's rules as the memory double states them, mirroring the Redis script (which has
/// the production statement): the contract suite checks that both decide alike.
extension CircuitPolicy {
    /// Whether a window holding `calls` verifications, `failures` of them outages, opens the circuit.
    public func shouldOpen(calls: Int, failures: Int) -> Bool {
        // The Redis script makes the same double comparison, so both implementations agree exactly.
        failures >= minimumFailures && Double(failures) >= failureRatio * Double(calls)
    }

    /// How long the circuit stays open after `failedProbes` probes failed in a row:
    /// `openDuration · 2^failedProbes`, at most `maximumOpenDuration`.
    public func openPeriod(afterFailedProbes failedProbes: Int) -> Duration {
        .milliseconds(openPeriodMilliseconds(afterFailedProbes: failedProbes))
    }

    func openPeriodMilliseconds(afterFailedProbes failedProbes: Int) -> Int64 {
        // Doubles, as in the Lua script: 2^n overflows to infinity, never to a negative number.
        let doubled = Double(CircuitTime.milliseconds(openDuration)) * pow(2, Double(max(failedProbes, 0)))
        return Int64(min(doubled, Double(CircuitTime.milliseconds(maximumOpenDuration))))
    }
}

/// The circuit's shared state and its rules, as a pure value: every decision takes `now`, nothing
/// reads a clock. ``MemoryOutageCircuit`` runs it under a lock.
///
/// A test double's model, not production code: production runs the rules once, in the Redis
/// adapter's circuit script. This is the same machine step for step, and the contract suite
/// (`OutageCircuitContractTests`) holds both implementations to the same decisions.
///
/// ```swift
/// var state = CircuitState()
/// switch state.permission(lane: "w1", now: now, policy: policy) { … }
/// state.record(outage: true, lane: "w1", now: now, policy: policy)
/// state.record(successes: 950, outages: 50, lane: "w1", now: now, policy: policy)
/// ```
public struct CircuitState: Sendable, Equatable {
    /// End of the open period (ms since 1970), or nil while closed.
    private var openUntil: Int64?
    /// Probes failed in a row since the circuit opened; doubles the open period each time.
    public private(set) var failedProbes = 0
    /// The current prober and the end of its lease.
    private var probe: ProbeLease?
    /// Calls and outages per bucket index, while closed.
    private var buckets: [Int64: Bucket] = [:]

    private struct ProbeLease: Sendable, Equatable {
        var lane: String
        /// End of the lease (ms since 1970).
        var until: Int64
    }

    private struct Bucket: Sendable, Equatable {
        var calls = 0
        var failures = 0
    }

    /// A closed circuit with an empty window.
    public init() {}

    /// The calls and outages the window holds in bucket `index` (``CircuitPolicy/bucketIndex(at:)``).
    public func counts(inBucket index: Int64) -> (calls: Int, failures: Int) {
        buckets[index].map { ($0.calls, $0.failures) } ?? (0, 0)
    }

    /// The state at `now`.
    public func status(now: Date) -> CircuitStatus {
        guard let openUntil else { return .closed }
        return CircuitTime.milliseconds(now) < openUntil ? .open(until: CircuitTime.date(openUntil)) : .halfOpen
    }

    /// Decides whether `lane` may call Apple at `now`, taking the probe lease when it is the first
    /// lane to ask after the open period.
    /// - Parameters:
    ///   - lane: the asking lane's unique token (the prober is recognised by it).
    ///   - now: the caller's time.
    ///   - policy: the thresholds.
    public mutating func permission(lane: String, now: Date, policy: CircuitPolicy) -> CircuitPermission {
        let now = CircuitTime.milliseconds(now)
        guard let openUntil else { return .allow }
        if now < openUntil { return .deny(until: CircuitTime.date(openUntil)) }
        if let probe, probe.lane != lane, now < probe.until {
            // Someone is probing: come back when it has surely answered, or after one base open
            // period, whichever is sooner, so that a quick success is not wasted on a long lease.
            return .deny(until: CircuitTime.date(min(probe.until, now + CircuitTime.milliseconds(policy.openDuration))))
        }
        // No lease, a lapsed one (its prober died or hangs), or this lane's own: probe (again).
        probe = ProbeLease(lane: lane, until: now + CircuitTime.milliseconds(policy.probeLease))
        return .probe
    }

    /// Records the outcome of one verification by `lane`.
    ///
    /// While closed, every outcome counts in the window and an outage may open the circuit. While
    /// open, only the prober's outcome counts: outcomes of calls that were already in flight when
    /// the circuit opened say nothing about now.
    /// - Parameters:
    ///   - outage: whether Apple failed (transport error, 5xx, 429, a non-JSON body).
    ///   - lane: the recording lane's token.
    ///   - now: the caller's time.
    ///   - policy: the thresholds.
    /// - Returns: the transition, if this outcome caused one.
    @discardableResult
    public mutating func record(outage: Bool, lane: String, now: Date, policy: CircuitPolicy) -> CircuitTransition? {
        if openUntil != nil { return recordVerdict(outage: outage, lane: lane, now: now, policy: policy) }
        return count(successes: outage ? 0 : 1, outages: outage ? 1 : 0, now: now, policy: policy)
    }

    /// Records the outcomes of a batch of verifications that were not probes, all at `now`.
    ///
    /// Counts as `successes` single records followed by `outages` single ones, except that only
    /// one transition can result. While open the batch is ignored: only the prober's verdict
    /// counts, and it comes through ``record(outage:lane:now:policy:)``. Negative counts are
    /// taken as zero, and an empty batch changes nothing.
    /// - Parameters:
    ///   - successes: calls that got an answer from Apple.
    ///   - outages: calls that met an outage.
    ///   - lane: the recording lane's token (unused: a batch is never a probe's verdict).
    ///   - now: the caller's time.
    ///   - policy: the thresholds.
    /// - Returns: `.opened(until:)` when the batch opened the circuit, otherwise nil.
    @discardableResult
    public mutating func record(
        successes: Int, outages: Int, lane: String, now: Date, policy: CircuitPolicy
    ) -> CircuitTransition? {
        guard openUntil == nil else { return nil }
        return count(successes: max(successes, 0), outages: max(outages, 0), now: now, policy: policy)
    }

    /// The prober's verdict while open; everyone else's outcome is ignored.
    private mutating func recordVerdict(outage: Bool, lane: String, now: Date, policy: CircuitPolicy) -> CircuitTransition? {
        guard probe?.lane == lane else { return nil }
        probe = nil
        if outage {
            failedProbes += 1
            let until = CircuitTime.milliseconds(now) + policy.openPeriodMilliseconds(afterFailedProbes: failedProbes)
            openUntil = until
            return .reopened(until: CircuitTime.date(until), failedProbes: failedProbes)
        }
        // Apple answered: forget the outage's window too, or its failures would re-open the
        // circuit on the next sporadic failure.
        self = CircuitState()
        return .closed
    }

    /// Counts outcomes in the closed circuit's window and opens it when the window says so.
    private mutating func count(successes: Int, outages: Int, now: Date, policy: CircuitPolicy) -> CircuitTransition? {
        // An empty batch must not even create a bucket, so that the state stays equal to the
        // Redis one (which skips the round trip).
        guard successes > 0 || outages > 0 else { return nil }
        let current = policy.bucketIndex(at: now)
        let oldest = current - Int64(policy.bucketCount) + 1
        buckets = buckets.filter { $0.key >= oldest }
        buckets[current, default: Bucket()].calls += successes + outages
        // Successes only dilute: they can never open the circuit.
        guard outages > 0 else { return nil }
        buckets[current, default: Bucket()].failures += outages
        let calls = buckets.values.reduce(0) { $0 + $1.calls }
        let failures = buckets.values.reduce(0) { $0 + $1.failures }
        // Each outage of the batch adds 1 to the failures but at most 1 to the ratio's bar, so once
        // the condition holds it keeps holding: checking once at the batch's end opens exactly when
        // one-by-one records would have opened somewhere inside it.
        guard policy.shouldOpen(calls: calls, failures: failures) else { return nil }
        let until = CircuitTime.milliseconds(now) + policy.openPeriodMilliseconds(afterFailedProbes: 0)
        openUntil = until
        failedProbes = 0
        return .opened(until: CircuitTime.date(until))
    }
}

/// An in-memory `OutageCircuit` for tests of the worker: thread-safe, and several instances (one
/// per simulated lane) can share one state, as lanes of several processes share Redis.
///
/// ```swift
/// let laneA = MemoryOutageCircuit(policy: policy)
/// let laneB = laneA.sharingLane()          // another lane, same circuit
/// ```
public final class MemoryOutageCircuit: OutageCircuit, Sendable {
    /// The shared state; a class so that lanes hold the same one.
    private final class Shared: Sendable {
        let state = Mutex(CircuitState())
    }

    /// The thresholds.
    public let policy: CircuitPolicy
    private let shared: Shared
    /// This lane's token, which recognises it as the prober.
    private let lane = UUID().uuidString

    /// Creates a closed circuit and its first lane.
    /// - Parameter policy: the thresholds.
    public convenience init(policy: CircuitPolicy = CircuitPolicy()) {
        self.init(policy: policy, shared: Shared())
    }

    private init(policy: CircuitPolicy, shared: Shared) {
        self.policy = policy
        self.shared = shared
    }

    /// Another lane on the same circuit (a lane of this or of another worker process).
    public func sharingLane() -> MemoryOutageCircuit {
        MemoryOutageCircuit(policy: policy, shared: shared)
    }

    public func permission(now: Date) throws -> CircuitPermission {
        shared.state.withLock { $0.permission(lane: lane, now: now, policy: policy) }
    }

    @discardableResult
    public func record(outage: Bool, now: Date) throws -> CircuitTransition? {
        shared.state.withLock { $0.record(outage: outage, lane: lane, now: now, policy: policy) }
    }

    @discardableResult
    public func record(successes: Int, outages: Int, now: Date) throws -> CircuitTransition? {
        shared.state.withLock { $0.record(successes: successes, outages: outages, lane: lane, now: now, policy: policy) }
    }

    public func state(now: Date) throws -> CircuitStatus {
        shared.state.withLock { $0.status(now: now) }
    }

    /// The shared state as it is now, for tests that look at what the circuit stores.
    public var snapshot: CircuitState { shared.state.withLock { $0 } }
}
