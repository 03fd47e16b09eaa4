import Foundation
import Hiredis
import ReceiptCore

/// ``ServerAPIRateLimiter`` in Redis: each decision is one script, so every worker process draws
/// from the same bucket. Time is the caller's `now`, as in ``RedisOutageCircuit``.
///
/// Not thread-safe: one per thread (the Server API client keeps one on its own serial queue).
public final class RedisServerAPIRateLimiter: ServerAPIRateLimiter, ImportRateBudget {
    private let connection: RedisConnection
    private let keys: RedisKeys

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
        let reply = try RedisScriptRunner.run(
            RedisScripts.serverAPIBucket, keys: [bucket, pause],
            arguments: [
                "reserve", milliseconds(now), String(rate), String(max(1, rate)), String(Int64(max(0, bookingAhead) * 1000)),
            ].map(bytes), on: connection)
        guard let wait = reply.int else { throw RedisQueueError.unexpectedReply("rate limiter") }
        if wait == 0 { return .now }
        let at = Date(timeIntervalSince1970: Double(abs(wait)) / 1000)
        return wait < 0 ? .booked(at) : .later(at)
    }

    public func pause(app: String, environment: AppStoreEnvironment, until: Date, now: Date) throws {
        _ = try RedisScriptRunner.run(
            RedisScripts.serverAPIBucket,
            keys: [
                keys.serverAPIBucket(app: app, environment: environment.rawValue, endpoint: "-"),
                keys.serverAPIPause(app: app, environment: environment.rawValue),
            ], arguments: ["pause", milliseconds(now), "0", milliseconds(until)].map(bytes), on: connection)
    }

    private func milliseconds(_ date: Date) -> String { String(Int64((date.timeIntervalSince1970 * 1000).rounded())) }
}
