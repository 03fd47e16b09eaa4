import Foundation
import Hiredis
import ReceiptCore

/// The outage circuit shared by every lane of every worker process through Redis.
///
/// Each decision is one run of the circuit's Lua script (`RedisScripts.outageCircuit`), where its
/// rules live, so two lanes can never both become the prober, and a probe's verdict and the
/// window's counts change together. Time is the caller's `now`, never the Redis server's clock, so
/// tests drive it; times are whole milliseconds rounded as ``CircuitTime`` rounds them, like every
/// implementation's.
///
/// Not thread-safe: a lane owns one (on its own connection, or one shared with its queue) and
/// calls it from its own thread, like ``RedisWorkQueue``.
///
/// ```swift
/// let circuit = RedisOutageCircuit(connection: redis, keys: RedisKeys(), policy: CircuitPolicy())
/// if case .deny(let until) = try circuit.permission(now: now) { … }
/// ```
public final class RedisOutageCircuit: OutageCircuit {
    /// The thresholds; every process sharing the prefix should use the same.
    public let policy: CircuitPolicy
    private let connection: RedisConnection
    private let keys: RedisKeys
    /// This instance's token in the probe lease: unique, so a lane recognises its own lease.
    private let lane = UUID().uuidString

    /// The end of an open period this lane has seen (ms), so that while the circuit is open most
    /// denials cost no round trip.
    ///
    /// The cache cannot make a wrong decision: an open period never ends early in Redis either
    /// (only a probe closes the circuit, and probes start only after it), and once it is over the
    /// lane asks Redis again. What it misses is an operator deleting the state key by hand: this
    /// lane notices at the end of the period it saw, at most ``CircuitPolicy/maximumOpenDuration``
    /// later. Thousands of denials per second during an outage are worth more than that.
    private var knownOpenUntil: Int64?
    /// Whether this lane took the probe lease and has not recorded its verdict yet.
    private var holdsProbe = false

    /// Creates a lane's view of the shared circuit.
    /// - Parameters:
    ///   - connection: the lane's connection (blocking calls, from the lane's thread).
    ///   - keys: the key schema; every process sharing the prefix shares the circuit.
    ///   - policy: the thresholds.
    public init(connection: RedisConnection, keys: RedisKeys, policy: CircuitPolicy = CircuitPolicy()) {
        self.connection = connection
        self.keys = keys
        self.policy = policy
    }

    public func permission(now: Date) throws -> CircuitPermission {
        let nowMs = CircuitTime.milliseconds(now)
        if !holdsProbe, let knownOpenUntil, nowMs < knownOpenUntil {
            return .deny(until: CircuitTime.date(knownOpenUntil))
        }
        knownOpenUntil = nil
        let reply = try evaluate("permission", now: now, successes: 0, outages: 0, buckets: [])
        switch reply.first {
        case 0:
            return .allow
        case 1:
            holdsProbe = true
            return .probe
        case 2 where reply.count >= 2:
            knownOpenUntil = reply[1]
            return .deny(until: CircuitTime.date(reply[1]))
        case 3 where reply.count >= 2:
            // Not cached: the probe in flight may close the circuit at any moment.
            return .deny(until: CircuitTime.date(reply[1]))
        default:
            throw RedisQueueError.unexpectedReply("outage circuit")
        }
    }

    @discardableResult
    public func record(outage: Bool, now: Date) throws -> CircuitTransition? {
        try record("record", successes: outage ? 0 : 1, outages: outage ? 1 : 0, now: now)
    }

    @discardableResult
    public func record(successes: Int, outages: Int, now: Date) throws -> CircuitTransition? {
        // An empty batch changes nothing: no round trip.
        guard successes > 0 || outages > 0 else { return nil }
        return try record("batch", successes: max(successes, 0), outages: max(outages, 0), now: now)
    }

    /// One `record` (a single outcome, perhaps this lane's probe verdict) or `batch` step.
    private func record(_ operation: String, successes: Int, outages: Int, now: Date) throws -> CircuitTransition? {
        let nowMs = CircuitTime.milliseconds(now)
        let isVerdict = operation == "record" && holdsProbe
        // While open, the script ignores every outcome but the prober's verdict: skip the round trip.
        if !isVerdict, let knownOpenUntil, nowMs < knownOpenUntil { return nil }
        let current = policy.bucketIndex(at: now)
        let buckets = (0..<Int64(policy.bucketCount)).map { keys.circuitCalls(bucket: current - $0) }
        let reply = try evaluate(operation, now: now, successes: successes, outages: outages, buckets: buckets)
        // A batch is never the verdict: a lane holding the probe still owes it.
        if operation == "record" { holdsProbe = false }
        switch reply.first {
        case 0:
            if reply.count >= 2, reply[1] > nowMs { knownOpenUntil = reply[1] }
            return nil
        case 1 where reply.count >= 2:
            knownOpenUntil = reply[1]
            return .opened(until: CircuitTime.date(reply[1]))
        case 2 where reply.count >= 3:
            knownOpenUntil = reply[1]
            return .reopened(until: CircuitTime.date(reply[1]), failedProbes: Int(reply[2]))
        case 3:
            knownOpenUntil = nil
            return .closed
        default:
            throw RedisQueueError.unexpectedReply("outage circuit")
        }
    }

    public func state(now: Date) throws -> CircuitStatus {
        let reply = try evaluate("state", now: now, successes: 0, outages: 0, buckets: [])
        guard reply.count >= 2 else { throw RedisQueueError.unexpectedReply("outage circuit") }
        if reply[0] == 0 { return .closed }
        return CircuitTime.milliseconds(now) < reply[1] ? .open(until: CircuitTime.date(reply[1])) : .halfOpen
    }

    /// Runs the script once and returns its integer array.
    private func evaluate(_ operation: String, now: Date, successes: Int, outages: Int, buckets: [String]) throws -> [Int64] {
        let keyArgs = [keys.circuitState, keys.circuitProbe] + buckets
        let args = [
            operation, String(CircuitTime.milliseconds(now)), lane, String(successes),
            String(policy.minimumFailures), String(policy.failureRatio),
            String(CircuitTime.milliseconds(policy.openDuration)), String(CircuitTime.milliseconds(policy.maximumOpenDuration)),
            String(CircuitTime.milliseconds(policy.probeLease)),
            // Only garbage collection: the window is chosen by key name from the caller's time, so
            // the server's clock never decides; twice the window leaves room for clock skew.
            String(2 * CircuitTime.milliseconds(policy.window) + CircuitTime.milliseconds(policy.bucketWidth)),
            String(outages),
        ]
        let reply = try RedisScriptRunner.run(RedisScripts.outageCircuit, keys: keyArgs, arguments: args.map(bytes), on: connection)
        guard let values = reply.array, !values.isEmpty else { throw RedisQueueError.unexpectedReply("outage circuit") }
        let numbers = values.compactMap { $0.int.map(Int64.init) }
        guard numbers.count == values.count else { throw RedisQueueError.unexpectedReply("outage circuit") }
        return numbers
    }
}
