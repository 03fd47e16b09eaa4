import Foundation
import Hiredis
import ReceiptCore

/// The outage circuit shared by every lane of every worker process through Redis.
///
/// Each decision is one `EVALSHA` of a versioned Lua script that runs ``CircuitState``'s rules
/// step for step, so two lanes can never both become the prober, and a probe's verdict and the
/// window's counts change together. Time is the caller's `now`, never the Redis server's clock:
/// the decisions then match the pure machine exactly, and tests drive them.
///
/// Not thread-safe: a lane owns one (on its own connection, or one shared with its queue) and
/// calls it from its own thread, like ``RedisWorkQueue``.
///
/// ```swift
/// let circuit = RedisOutageCircuit(connection: redis, keys: RedisKeys(), policy: CircuitPolicy())
/// if case .deny(let until) = try circuit.permission(now: now) { … }
/// ```
public final class RedisOutageCircuit: OutageCircuit {
    /// The circuit's single script. Versioned (the name carries the version) so a changed script
    /// never runs under an old SHA. `KEYS[3]` onwards are the window's buckets, newest first,
    /// computed by the caller from its `now` so that every key the script touches is declared
    /// (Redis Cluster) and shares the prefix's hash tag.
    ///
    /// v2 counts outcomes in batches: `record` is one outcome (counts 1/0 or 0/1) that may be the
    /// prober's verdict, `batch` is any number of non-probe outcomes and is ignored while open.
    static let script = """
        -- receiptq:circuit:v2
        -- KEYS: state hash, probe lease, then the window's call buckets (current first).
        -- ARGV: op, now ms, lane, successes, minimum failures, failure ratio, open ms,
        --       maximum open ms, probe lease ms, bucket TTL ms, outages.
        local op, now, lane = ARGV[1], tonumber(ARGV[2]), ARGV[3]
        local openMs, maxOpenMs, leaseMs = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
        local openUntil = redis.call('HGET', KEYS[1], 'open_until')
        openUntil = openUntil and tonumber(openUntil)
        local failedProbes = tonumber(redis.call('HGET', KEYS[1], 'failed_probes') or '0')
        local holder, leaseUntil = nil, 0
        local lease = redis.call('GET', KEYS[2])
        if lease then
          local h, u = string.match(lease, '^(%S+) (%-?%d+)$')
          holder, leaseUntil = h, tonumber(u) or 0
        end

        if op == 'state' then
          if not openUntil then return {0, 0, 0} end
          return {1, openUntil, failedProbes}
        end

        if op == 'permission' then
          if not openUntil then return {0, 0} end
          if now < openUntil then return {2, openUntil} end
          if holder and holder ~= lane and now < leaseUntil then
            -- A probe is in flight: back when it surely answered, or after one base open period.
            return {3, math.min(leaseUntil, now + openMs)}
          end
          -- Half-open and no live lease (none, lapsed, or this lane's own): this lane probes.
          redis.call('SET', KEYS[2], lane .. ' ' .. string.format('%d', now + leaseMs))
          return {1, now + leaseMs}
        end

        -- op == 'record' (one outcome, perhaps the prober's) or 'batch' (never the prober's)
        local successes = math.max(tonumber(ARGV[4]) or 0, 0)
        local outages = math.max(tonumber(ARGV[11]) or 0, 0)
        if openUntil then
          -- Open: only the prober's verdict counts; calls in flight when it opened say nothing.
          if op ~= 'record' or holder ~= lane then return {0, openUntil} end
          redis.call('DEL', KEYS[2])
          if outages > 0 then
            failedProbes = failedProbes + 1
            local untilMs = now + math.min(openMs * 2 ^ failedProbes, maxOpenMs)
            redis.call('HSET', KEYS[1], 'open_until', string.format('%d', untilMs), 'failed_probes', failedProbes)
            return {2, untilMs, failedProbes}
          end
          -- Apple answered: close, and forget the outage's window so it cannot re-open at once.
          redis.call('DEL', KEYS[1], unpack(KEYS, 3))
          return {3, 0, 0}
        end

        if successes + outages == 0 then return {0, 0} end
        redis.call('HINCRBY', KEYS[3], 'c', string.format('%d', successes + outages))
        if outages > 0 then redis.call('HINCRBY', KEYS[3], 'f', string.format('%d', outages)) end
        redis.call('PEXPIRE', KEYS[3], ARGV[10])
        -- Successes only dilute. Outages raise the failures by 1 and the ratio's bar by at most 1
        -- each, so one check at the batch's end opens exactly when one-by-one records would have.
        if outages == 0 then return {0, 0} end
        local calls, failures = 0, 0
        for i = 3, #KEYS do
          local counts = redis.call('HMGET', KEYS[i], 'c', 'f')
          calls = calls + (tonumber(counts[1]) or 0)
          failures = failures + (tonumber(counts[2]) or 0)
        end
        if failures >= tonumber(ARGV[5]) and failures >= tonumber(ARGV[6]) * calls then
          local untilMs = now + math.min(openMs, maxOpenMs)
          redis.call('HSET', KEYS[1], 'open_until', string.format('%d', untilMs), 'failed_probes', 0)
          return {1, untilMs, 0}
        end
        return {0, 0}
        """

    /// The thresholds; every process sharing the prefix should use the same.
    public let policy: CircuitPolicy
    private let connection: RedisConnection
    private let keys: RedisKeys
    /// This instance's token in the probe lease: unique, so a lane recognises its own lease.
    private let lane = UUID().uuidString
    private var scriptSHA: String?

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
        let nowMs = Self.milliseconds(now)
        if !holdsProbe, let knownOpenUntil, nowMs < knownOpenUntil {
            return .deny(until: Self.date(knownOpenUntil))
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
            return .deny(until: Self.date(reply[1]))
        case 3 where reply.count >= 2:
            // Not cached: the probe in flight may close the circuit at any moment.
            return .deny(until: Self.date(reply[1]))
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
        let nowMs = Self.milliseconds(now)
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
            return .opened(until: Self.date(reply[1]))
        case 2 where reply.count >= 3:
            knownOpenUntil = reply[1]
            return .reopened(until: Self.date(reply[1]), failedProbes: Int(reply[2]))
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
        return Self.milliseconds(now) < reply[1] ? .open(until: Self.date(reply[1])) : .halfOpen
    }

    /// Runs the script once and returns its integer array.
    private func evaluate(_ operation: String, now: Date, successes: Int, outages: Int, buckets: [String]) throws -> [Int64] {
        let keyArgs = [keys.circuitState, keys.circuitProbe] + buckets
        let args = [
            operation, String(Self.milliseconds(now)), lane, String(successes),
            String(policy.minimumFailures), String(policy.failureRatio),
            String(Self.milliseconds(policy.openDuration)), String(Self.milliseconds(policy.maximumOpenDuration)),
            String(Self.milliseconds(policy.probeLease)),
            // Only garbage collection: the window is chosen by key name from the caller's time, so
            // the server's clock never decides; twice the window leaves room for clock skew.
            String(2 * Self.milliseconds(policy.window) + Self.milliseconds(policy.bucketWidth)),
            String(outages),
        ]
        let command = [String(keyArgs.count)] + keyArgs + args
        let reply: RedisValue
        do {
            reply = try connection.send(["EVALSHA", try loadedScript()] + command)
        } catch let error as RedisError where error.message.hasPrefix("NOSCRIPT") {
            // Redis restarted (scripts are not persisted): load again, once.
            scriptSHA = nil
            reply = try connection.send(["EVALSHA", try loadedScript()] + command)
        }
        guard let values = reply.array, !values.isEmpty else { throw RedisQueueError.unexpectedReply("outage circuit") }
        let numbers = values.compactMap { $0.int.map(Int64.init) }
        guard numbers.count == values.count else { throw RedisQueueError.unexpectedReply("outage circuit") }
        return numbers
    }

    private func loadedScript() throws -> String {
        if let scriptSHA { return scriptSHA }
        guard let sha = try connection.send(["SCRIPT", "LOAD", Self.script]).string else {
            throw RedisQueueError.unexpectedReply("outage circuit")
        }
        scriptSHA = sha
        return sha
    }

    /// Rounded to the nearest millisecond, as ``CircuitState`` does, so both decide alike.
    private static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    private static func milliseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    private static func date(_ milliseconds: Int64) -> Date { Date(timeIntervalSince1970: Double(milliseconds) / 1000) }
}
