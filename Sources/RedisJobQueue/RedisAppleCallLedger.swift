import Foundation
import Hiredis
import ReceiptCore

/// ``AppleCallLedger`` from the hour and minute hashes ``RedisServerAPIRateLimiter`` counts in as
/// it grants calls: what every process of the deployment spent, in one round trip per app.
public struct RedisAppleCallLedger: AppleCallLedger {
    private let pool: RedisConnectionPool
    private let keys: RedisKeys

    /// Creates the ledger on the API's pool.
    public init(pool: RedisConnectionPool, keys: RedisKeys) {
        self.pool = pool
        self.keys = keys
    }

    public func usage(app: String, environment: AppStoreEnvironment, now: Date) async throws -> AppleCallUsage {
        let (hour, minute) = RedisServerAPIRateLimiter.windows(now)
        let keys = self.keys
        // The last whole minute: the current one is still filling.
        let replies = try await pool.withConnectionRetryingOnce { connection in
            try connection.pipeline([
                ["HGETALL", keys.serverAPIHour(app: app, environment: environment.rawValue, hour: hour)],
                ["HGETALL", keys.serverAPIMinute(app: app, environment: environment.rawValue, minute: minute - 1)],
            ])
        }
        let hourly = Self.fields(replies[0])
        let lastMinute = Self.fields(replies[1])
        var lines: [AppleCallUsage.Line] = []
        for endpoint in ServerAPIEndpoint.allCases {
            for purpose in ApplePurpose.allCases {
                let field = RedisServerAPIRateLimiter.field(endpoint, purpose)
                let line = AppleCallUsage.Line(endpoint: endpoint, purpose: purpose, hour: hourly[field] ?? 0, lastMinute: lastMinute[field] ?? 0)
                if line.hour > 0 || line.lastMinute > 0 { lines.append(line) }
            }
        }
        return AppleCallUsage(app: app, environment: environment, hourStart: Date(timeIntervalSince1970: Double(hour) * 3600), lines: lines)
    }

    private static func fields(_ reply: RedisValue) -> [String: Int] {
        let items = reply.array ?? []
        var result: [String: Int] = [:]
        for index in stride(from: 0, to: items.count - 1, by: 2) {
            guard let field = items[index].string, let value = items[index + 1].string.flatMap({ Int($0) }) else { continue }
            result[field] = value
        }
        return result
    }
}
