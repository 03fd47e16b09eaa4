import Foundation
import Hiredis
import ReceiptCore

/// ``ServerAPIRateLimiter`` in Redis: each decision is one script, so every worker process draws
/// from the same bucket. Time is the caller's `now`, as in ``RedisOutageCircuit``.
///
/// Not thread-safe: one per thread (the Server API client keeps one on its own serial queue).
public final class RedisServerAPIRateLimiter: ServerAPIRateLimiter, ImportRateBudget {
    /// `reserve`: refill at the rate, take a token, or book one of the next `ahead` ms (the
    /// bucket goes below zero: later callers queue behind it), or say when to ask again (a
    /// positive time; a booked slot comes back negative); a pause wins.
    /// `pause`: extend the app's pause to `until` (never shorten it).
    static let script = """
        -- receiptq:serverapi-bucket:v2
        -- KEYS: bucket hash, app pause. ARGV: op, now ms, rate per second, burst / pause until ms, booking ms.
        local op, now = ARGV[1], tonumber(ARGV[2])
        local paused = tonumber(redis.call('GET', KEYS[2]) or '0')
        if op == 'pause' then
          local untilMs = tonumber(ARGV[4])
          if untilMs > paused and untilMs > now then
            redis.call('SET', KEYS[2], string.format('%d', untilMs), 'PX', math.floor(untilMs - now) + 1)
          end
          return 0
        end
        if paused > now then return paused end
        local rate, burst = tonumber(ARGV[3]), tonumber(ARGV[4])
        local tokens = tonumber(redis.call('HGET', KEYS[1], 't') or ARGV[4])
        local last = tonumber(redis.call('HGET', KEYS[1], 'ts') or ARGV[2])
        if now > last then tokens = math.min(burst, tokens + (now - last) * rate / 1000) else now = last end
        local wait = 0
        if tokens < 1 then wait = math.ceil((1 - tokens) * 1000 / rate) end
        local take = wait <= tonumber(ARGV[5] or '0')
        if take then tokens = tokens - 1 end
        redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', string.format('%d', now))
        -- Kept until it has refilled (a booked bucket is below zero).
        redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000) + 1000)
        if not take then return now + wait end
        if wait == 0 then return 0 end
        return -(now + wait)
        """

    private let connection: RedisConnection
    private let keys: RedisKeys
    private var runner = ScriptRunner(source: script)

    /// Creates a limiter on `connection`.
    public init(connection: RedisConnection, keys: RedisKeys) {
        self.connection = connection
        self.keys = keys
    }

    public func reserve(
        app: String, endpoint: ServerAPIEndpoint, environment: AppStoreEnvironment, now: Date, bookingAhead: TimeInterval
    ) throws -> ServerAPISlot {
        try take(
            bucket: keys.serverAPIBucket(app: app, environment: environment.rawValue, endpoint: endpoint.rawValue),
            pause: keys.serverAPIPause(app: app, environment: environment.rawValue), rate: endpoint.ratePerSecond(in: environment), now: now,
            bookingAhead: bookingAhead)
    }

    /// The import budget is a bucket of its own per app, and it waits out a `429` pause of the
    /// app's production Server API calls like them.
    public func reserveImport(app: String, ratePerSecond: Double, now: Date, bookingAhead: TimeInterval) throws -> ServerAPISlot {
        try take(
            bucket: keys.importBucket(app: app), pause: keys.serverAPIPause(app: app, environment: AppStoreEnvironment.production.rawValue),
            rate: max(0.001, ratePerSecond), now: now, bookingAhead: bookingAhead)
    }

    /// One token of `bucket` at `rate` (the script's `reserve`), unless `pause` holds the app.
    private func take(bucket: String, pause: String, rate: Double, now: Date, bookingAhead: TimeInterval) throws -> ServerAPISlot {
        // A second's worth of burst (at least one call): Apple counts per hour, so short bursts are
        // fine, but a backlog must not fire an hour's budget at once.
        let reply = try runner.run(
            on: connection, keyCount: 2,
            arguments: [
                bytes(bucket), bytes(pause), bytes("reserve"), bytes(milliseconds(now)), bytes(String(rate)), bytes(String(max(1, rate))),
                bytes(String(Int64(max(0, bookingAhead) * 1000))),
            ])
        guard let wait = reply.int else { throw RedisQueueError.unexpectedReply("rate limiter") }
        if wait == 0 { return .now }
        let at = Date(timeIntervalSince1970: Double(abs(wait)) / 1000)
        return wait < 0 ? .booked(at) : .later(at)
    }

    public func pause(app: String, environment: AppStoreEnvironment, until: Date, now: Date) throws {
        _ = try runner.run(
            on: connection, keyCount: 2,
            arguments: [
                bytes(keys.serverAPIBucket(app: app, environment: environment.rawValue, endpoint: "-")),
                bytes(keys.serverAPIPause(app: app, environment: environment.rawValue)), bytes("pause"), bytes(milliseconds(now)), bytes("0"),
                bytes(milliseconds(until)),
            ])
    }

    private func milliseconds(_ date: Date) -> String { String(Int64((date.timeIntervalSince1970 * 1000).rounded())) }
}
