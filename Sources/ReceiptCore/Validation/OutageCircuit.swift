import Foundation
import Synchronization

/// When the shared outage circuit opens, how long it stays open, and how its probes back off.
///
/// The circuit counts verifications over a sliding `window` (in buckets of `bucketWidth`, so that
/// the Redis implementation can keep one small counter per bucket). It opens when at least
/// `minimumFailures` of them were outages *and* they were at least `failureRatio` of all the calls:
/// the count stops a quiet night's three failures from opening it, the ratio stops a busy hour's
/// sporadic failures from doing so.
///
/// ```swift
/// let policy = CircuitPolicy(minimumFailures: 50, openDuration: .seconds(5))
/// let circuit = MemoryOutageCircuit(policy: policy)
/// ```
public struct CircuitPolicy: Sendable, Equatable {
    /// How far back outages count.
    public var window: Duration
    /// The granularity of the window: calls are counted per bucket of this width.
    public var bucketWidth: Duration
    /// The fewest outages in the window that can open the circuit.
    public var minimumFailures: Int
    /// The share of the window's calls that must be outages to open the circuit (0…1).
    public var failureRatio: Double
    /// How long the circuit stays open before the first probe.
    public var openDuration: Duration
    /// The longest open period: each failed probe doubles the period up to this.
    public var maximumOpenDuration: Duration
    /// How long the prober holds its lease: another lane may probe once it lapses, so a prober
    /// that died does not keep the circuit open forever. Must exceed one whole verification.
    public var probeLease: Duration

    /// Creates a policy. Out-of-range values are clamped so that a misconfiguration cannot make the
    /// circuit open on the first failure or never close.
    /// - Parameters:
    ///   - window: how far back outages count (default 30 s).
    ///   - bucketWidth: counting granularity (default 1 s); the window holds at most 300 buckets.
    ///   - minimumFailures: the fewest outages that open the circuit (default 20, at least 1).
    ///   - failureRatio: the share of calls that must be outages (default 0.8, within 0…1).
    ///   - openDuration: the first open period (default 10 s).
    ///   - maximumOpenDuration: the longest open period (default 5 min).
    ///   - probeLease: how long a probe may take before another lane probes (default 30 s).
    public init(
        window: Duration = .seconds(30), bucketWidth: Duration = .seconds(1), minimumFailures: Int = 20, failureRatio: Double = 0.8,
        openDuration: Duration = .seconds(10), maximumOpenDuration: Duration = .seconds(300), probeLease: Duration = .seconds(30)
    ) {
        let minimumStep = Duration.milliseconds(1)
        self.bucketWidth = max(bucketWidth, minimumStep)
        // A window of more than 300 buckets would make every recorded outage read 300+ keys.
        self.window = min(max(window, self.bucketWidth), self.bucketWidth * 300)
        self.minimumFailures = max(minimumFailures, 1)
        self.failureRatio = failureRatio.isNaN ? 1 : min(max(failureRatio, 0), 1)
        self.openDuration = max(openDuration, minimumStep)
        self.maximumOpenDuration = max(maximumOpenDuration, self.openDuration)
        self.probeLease = max(probeLease, minimumStep)
    }

    /// How many buckets the window spans (the current one included).
    public var bucketCount: Int {
        let width = CircuitTime.milliseconds(bucketWidth)
        return Int((CircuitTime.milliseconds(window) + width - 1) / width)
    }

    /// The bucket `date` falls in; buckets are numbered from 1970, so every process agrees.
    /// - Parameter date: a time from the caller's clock.
    /// - Returns: the bucket's number (the Unix second, with the default width).
    public func bucketIndex(at date: Date) -> Int64 {
        let width = CircuitTime.milliseconds(bucketWidth)
        let ms = CircuitTime.milliseconds(date)
        // Floor division, so times before 1970 (only in odd tests) still fall in one bucket each.
        return ms >= 0 ? ms / width : -((-ms + width - 1) / width)
    }

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

/// What a lane may do before calling Apple.
public enum CircuitPermission: Sendable, Equatable {
    /// The circuit is closed: call Apple.
    case allow
    /// The open period is over and this lane is the single prober: call Apple and report the
    /// outcome with ``OutageCircuit/record(outage:now:)``; the verdict closes or re-opens the circuit.
    case probe
    /// Apple is down for everyone: do not call it; try again at `until` (or later).
    case deny(until: Date)
}

/// The circuit's state, for dashboards and metrics.
public enum CircuitStatus: Sendable, Equatable {
    /// Calls go through.
    case closed
    /// Calls are denied until `until`.
    case open(until: Date)
    /// The open period is over: one probe is allowed (or in flight); the others are still denied.
    case halfOpen

    /// A bounded name for metric labels and logs: `closed`, `open` or `half_open`.
    public var name: String {
        switch self {
        case .closed: "closed"
        case .open: "open"
        case .halfOpen: "half_open"
        }
    }
}

/// A change of the circuit caused by a recorded outcome; returned so that exactly one lane (the
/// one whose record caused it) logs it or counts it in a metric.
public enum CircuitTransition: Sendable, Equatable {
    /// A run of outages opened the closed circuit until `until`.
    case opened(until: Date)
    /// The probe met an outage: open again until `until`, after `failedProbes` failed probes in a row.
    case reopened(until: Date, failedProbes: Int)
    /// The probe got an answer from Apple: calls go through again.
    case closed
}

/// The shared circuit as one worker lane sees it: asked before every verification, told after it.
///
/// Blocking, like ``JobQueue``: each lane owns one and calls it from its own Dispatch thread; all
/// lanes of all processes share the same state (Redis in production, a ``MemoryOutageCircuit``
/// store in tests). Time always comes from the caller, so tests drive it.
public protocol OutageCircuit: AnyObject {
    /// Before calling Apple: may this lane call now?
    /// - Parameter now: the current time from the lane's injected clock.
    /// - Returns: `.allow`, `.probe` (this lane is the single prober; report its outcome), or
    ///   `.deny(until:)`.
    /// - Throws: when the shared state is unreachable.
    func permission(now: Date) throws -> CircuitPermission

    /// After a call (or a whole verification): what Apple did. Outages count against the circuit;
    /// any answer from Apple (valid/invalid/transient status) counts as success.
    /// - Parameters:
    ///   - outage: whether the verdict was ``AppleVerdict/outage``.
    ///   - now: the current time from the lane's injected clock.
    /// - Returns: the transition this record caused, if any.
    /// - Throws: when the shared state is unreachable.
    @discardableResult
    func record(outage: Bool, now: Date) throws -> CircuitTransition?

    /// After a batch of calls that were not probes: their outcomes in one step, so that a lane
    /// verifying thousands of receipts a second does not pay one round trip per receipt.
    ///
    /// The same as calling ``record(outage:now:)`` `successes` times and then `outages` times at
    /// `now`, except that only one transition can result: the batch can open the closed circuit,
    /// nothing else. While the circuit is open (or half-open) a batch is ignored, because only the
    /// prober's verdict counts there, and the prober always reports with ``record(outage:now:)``.
    /// Zero successes and zero outages change nothing; negative counts are taken as zero.
    /// - Parameters:
    ///   - successes: calls that got an answer from Apple (valid/invalid/transient status).
    ///   - outages: calls whose verdict was ``AppleVerdict/outage``.
    ///   - now: the current time from the lane's injected clock; the whole batch counts at it.
    /// - Returns: `.opened(until:)` when the batch opened the circuit, otherwise nil.
    /// - Throws: when the shared state is unreachable.
    @discardableResult
    func record(successes: Int, outages: Int, now: Date) throws -> CircuitTransition?

    /// The current state, for dashboards and metrics.
    /// - Parameter now: the current time from the caller's injected clock.
    /// - Throws: when the shared state is unreachable.
    func state(now: Date) throws -> CircuitStatus
}

/// The circuit's shared state and its rules, as a pure value: every decision takes `now`, nothing
/// reads a clock. ``MemoryOutageCircuit`` runs it under a lock; `RedisOutageCircuit`'s Lua script
/// is the same machine, step for step, over Redis keys.
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

/// An in-memory ``OutageCircuit`` for tests of the worker: thread-safe, and several instances (one
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
}

/// Millisecond conversions, in one place: the Redis script works in integer milliseconds, so the
/// pure machine does too, and both round alike.
enum CircuitTime {
    /// Rounded to the nearest millisecond, so that a `Date` made from milliseconds converts back exactly.
    static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    static func milliseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    static func date(_ milliseconds: Int64) -> Date { Date(timeIntervalSince1970: Double(milliseconds) / 1000) }
}
