import Foundation
import Hiredis
import ReceiptCore

/// ``AppleCallLedger`` from the hour and minute hashes ``RedisServerAPIRateLimiter`` counts in as
/// it grants calls: what every process of the deployment spent, every app's in one pipelined round trip (sliced
/// past a thousand apps).
public struct RedisAppleCallLedger: AppleCallLedger {
    private let pool: RedisConnectionPool
    private let keys: RedisKeys

    /// Creates the ledger on the API's pool.
    public init(pool: RedisConnectionPool, keys: RedisKeys) {
        self.pool = pool
        self.keys = keys
    }

    public func usage(apps: [String], now: Date) async throws -> [AppleCallUsage] {
        let (hour, minute) = RedisServerAPIRateLimiter.windows(now)
        let keys = self.keys
        let asked = apps.flatMap { app in AppStoreEnvironment.allCases.map { (app: app, environment: $0) } }
        // Two hashes per app and environment: this hour's and the last whole minute's (the current one is still filling).
        let commands = asked.flatMap { app, environment in
            [
                ["HGETALL", keys.serverAPIHour(app: app, environment: environment.rawValue, hour: hour)],
                ["HGETALL", keys.serverAPIMinute(app: app, environment: environment.rawValue, minute: minute - 1)],
            ]
        }
        var replies: [RedisValue] = []
        // In slices: one pipeline of every app's hashes would hold all their replies in one buffer.
        for start in stride(from: 0, to: commands.count, by: Self.slice) {
            let slice = Array(commands[start..<min(commands.count, start + Self.slice)])
            replies += try await pool.withConnectionRetryingOnce { connection in try connection.pipeline(slice) }
        }
        let hourStart = Date(timeIntervalSince1970: Double(hour) * 3600)
        return asked.enumerated().map { index, asked in
            let hourly = Self.fields(replies[2 * index])
            let lastMinute = Self.fields(replies[2 * index + 1])
            var lines: [AppleCallUsage.Line] = []
            for endpoint in ServerAPIEndpoint.allCases {
                for purpose in ApplePurpose.allCases {
                    let field = RedisServerAPIRateLimiter.field(endpoint, purpose)
                    let line = AppleCallUsage.Line(
                        endpoint: endpoint, purpose: purpose, hour: hourly[field] ?? 0, lastMinute: lastMinute[field] ?? 0)
                    if line.hour > 0 || line.lastMinute > 0 { lines.append(line) }
                }
            }
            return AppleCallUsage(app: asked.app, environment: asked.environment, hourStart: hourStart, lines: lines)
        }
    }

    /// Commands per pipelined round trip (a thousand apps' worth).
    static let slice = 4_000

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
