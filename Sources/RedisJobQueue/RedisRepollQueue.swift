import Foundation
import Hiredis
import ReceiptCore

/// The scheduler's Redis side for re-polls: a token bucket shared by every scheduler replica (so a
/// backlog after downtime reaches Apple at the configured rate, however many replicas run), and
/// an enqueue that takes each poll once.
///
/// Not thread-safe: the scheduler's thread owns it.
public final class RedisRepollQueue: RepollQueue {
    static let budgetScript = """
        -- receiptq:repoll_budget:v1
        -- KEYS: bucket hash; ARGV: now ms, tokens per second, burst, wanted
        local now = tonumber(ARGV[1])
        local rate = tonumber(ARGV[2])
        local burst = tonumber(ARGV[3])
        local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
        local tokens = tonumber(state[1]) or burst
        local at = tonumber(state[2]) or now
        -- A replica whose clock lags never takes the bucket back in time.
        if now > at then
          tokens = math.min(burst, tokens + (now - at) * rate / 1000)
          at = now
        end
        local granted = math.max(0, math.min(tonumber(ARGV[4]), math.floor(tokens)))
        redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - granted), 'at', tostring(at))
        redis.call('EXPIRE', KEYS[1], 86400)
        return granted
        """

    static let enqueueScript = """
        -- receiptq:repoll_enqueue:v1
        -- KEYS: repoll queue, then one marker per job; ARGV: marker TTL seconds, then the jobs
        local queued = 0
        for i = 2, #KEYS do
          if redis.call('SET', KEYS[i], '1', 'NX', 'EX', tonumber(ARGV[1])) then
            redis.call('LPUSH', KEYS[1], ARGV[i])
            queued = queued + 1
          end
        end
        return queued
        """

    private let connection: RedisConnection
    private let keys: RedisKeys
    private let ratePerSecond: Double
    private let burst: Int
    private let markerTTL: Duration
    private let replication: ReplicaAcknowledgement?
    private var budget = ScriptRunner(source: RedisRepollQueue.budgetScript)
    private var enqueuer = ScriptRunner(source: RedisRepollQueue.enqueueScript)

    /// Creates the queue on the scheduler's own connection.
    /// - Parameters:
    ///   - ratePerSecond: re-polls per second across every replica (`REPOLL_RATE_PER_SECOND`).
    ///   - burst: the most re-polls taken at once after an idle spell (default: one second's worth).
    ///   - markerTTL: how long a queued poll is remembered; longer than a scheduler's transaction can take.
    ///   - replication: replicas that must hold each enqueue before its subscriptions advance (a
    ///     lost job would otherwise wait out the claim's lease).
    public init(
        connection: RedisConnection, keys: RedisKeys, ratePerSecond: Double, burst: Int? = nil, markerTTL: Duration = .seconds(86_400),
        replication: ReplicaAcknowledgement? = nil
    ) {
        self.connection = connection
        self.keys = keys
        self.ratePerSecond = max(0, ratePerSecond)
        self.burst = max(1, burst ?? Int(ratePerSecond.rounded(.up)))
        self.markerTTL = markerTTL
        self.replication = replication
    }

    public func acquire(_ wanted: Int, now: Date) throws -> Int {
        guard wanted > 0 else { return 0 }
        let arguments = [keys.repollBudget, String(milliseconds(now)), String(ratePerSecond), String(burst), String(wanted)]
        return try budget.run(on: connection, keyCount: 1, arguments: arguments.map(bytes)).int ?? 0
    }

    public func enqueue(_ jobs: [JobEnvelope]) throws -> Int {
        let targeted = jobs.compactMap { job -> (JobEnvelope, RepollJob)? in
            guard case .repoll(let repoll) = job.payload else { return nil }
            return (job, repoll)
        }
        guard !targeted.isEmpty else { return 0 }
        let markers = targeted.map { job, repoll in
            keys.repollMarker(
                app: job.appID.uuidString.lowercased(), environment: repoll.environment ?? "",
                originalTransactionID: repoll.target.originalTransactionID, pollSequence: repoll.target.pollSequence)
        }
        let arguments: [[UInt8]] =
            ([keys.queue(JobKind.repoll.rawValue)] + markers).map(bytes) + [bytes(String(Int(markerTTL.seconds)))]
            + targeted.map { job, _ in job.encoded() }
        let queued = try enqueuer.run(on: connection, keyCount: markers.count + 1, arguments: arguments).int ?? 0
        try replication?.confirm(on: connection)
        return queued
    }
}
