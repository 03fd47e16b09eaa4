import Foundation
import Hiredis
import ReceiptCore

/// ``ServerAPIRateLimiter`` in Redis: each decision is one script, so every worker process draws
/// from the same bucket and counts in the same hour. Time is the caller's `now`, as in
/// ``RedisOutageCircuit``.
///
/// Not thread-safe: one per thread (the Server API client keeps one on its own serial queue).
public final class RedisServerAPIRateLimiter: ServerAPIRateLimiter, ImportRateBudget {
    private let connection: RedisConnection
    private let keys: RedisKeys
    private let budget: HourlyCallBudget

    /// Creates a limiter on `connection`, sharing each app's hours by `budget`.
    public init(connection: RedisConnection, keys: RedisKeys, budget: HourlyCallBudget = HourlyCallBudget()) {
        self.connection = connection
        self.keys = keys
        self.budget = budget
    }

    public func reserve(
        app: String, endpoint: ServerAPIEndpoint, environment: AppStoreEnvironment, purpose: ApplePurpose, now: Date,
        bookingAhead: TimeInterval
    ) throws -> ServerAPISlot {
        let account = Account(
            endpoint: endpoint.rawValue, line: Self.field(endpoint, purpose),
            limit: budget.limit(for: purpose, endpoint: endpoint, environment: environment), nextHour: HourlyCallBudget.nextHour(after: now))
        return try take(
            bucket: keys.serverAPIBucket(app: app, environment: environment.rawValue, endpoint: endpoint.rawValue), app: app,
            environment: environment, rate: endpoint.ratePerSecond(in: environment), now: now, bookingAhead: bookingAhead, account: account)
    }

    /// The import budget is a bucket of its own per app, and it waits out a `429` pause of the
    /// app's production Server API calls like them. It counts nothing: the import's calls are
    /// counted when they reserve their endpoint's slot.
    public func reserveImport(app: String, ratePerSecond: Double, now: Date, bookingAhead: TimeInterval) throws -> ServerAPISlot {
        try take(
            bucket: keys.importBucket(app: app), app: app, environment: .production, rate: max(0.001, ratePerSecond), now: now,
            bookingAhead: bookingAhead, account: nil)
    }

    /// What a granted call is counted as, and its purpose's limit for the hour.
    private struct Account {
        var endpoint: String
        var line: String
        var limit: Int
        var nextHour: Date
    }

    /// One token of `bucket` at `rate` (the script's `reserve`), unless the app's pause holds it or
    /// `account`'s limit for the hour is spent.
    private func take(
        bucket: String, app: String, environment: AppStoreEnvironment, rate: Double, now: Date, bookingAhead: TimeInterval, account: Account?
    ) throws -> ServerAPISlot {
        let (hour, minute) = Self.windows(now)
        // A second's worth of burst (at least one call): Apple counts per hour, so short bursts are
        // fine, but a backlog must not fire an hour's budget at once.
        let reply = try RedisScriptRunner.run(
            RedisScripts.serverAPIBucket,
            keys: [
                bucket, keys.serverAPIPause(app: app, environment: environment.rawValue),
                keys.serverAPIHour(app: app, environment: environment.rawValue, hour: hour),
                keys.serverAPIMinute(app: app, environment: environment.rawValue, minute: minute),
            ],
            arguments: [
                "reserve", milliseconds(now), String(rate), String(max(1, rate)), String(Int64(max(0, bookingAhead) * 1000)),
                account?.endpoint ?? "", account?.line ?? "", String(account?.limit ?? 0), account.map { milliseconds($0.nextHour) } ?? "0",
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

    /// The field of one endpoint's calls for one purpose in the hour and minute hashes.
    static func field(_ endpoint: ServerAPIEndpoint, _ purpose: ApplePurpose) -> String { "\(endpoint.rawValue)|\(purpose.rawValue)" }

    /// The UTC hour and minute of `now` (seconds since 1970 ÷ 3600 and ÷ 60).
    static func windows(_ now: Date) -> (hour: Int64, minute: Int64) {
        let seconds = Int64(floor(now.timeIntervalSince1970))
        return (seconds / 3600, seconds / 60)
    }

    private func milliseconds(_ date: Date) -> String { String(Int64((date.timeIntervalSince1970 * 1000).rounded())) }
}
