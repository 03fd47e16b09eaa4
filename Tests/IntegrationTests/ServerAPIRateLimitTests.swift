import Foundation
import Hiredis
import ReceiptCore
import ReceiptTesting
import RedisJobQueue
import Testing

/// The Server API's shared token bucket against a real Redis: several limiters, each on its own
/// connection like the worker processes of one deployment, under one unique prefix.
@Suite("Server API rate limit on Redis", .enabled(if: TestEnvironment.integrationEnabled))
struct ServerAPIRateLimitTests {
    let start = Date(timeIntervalSince1970: 1_800_000_000)
    let keys = RedisKeys(prefix: "{rqt-\(UUID().uuidString.prefix(8).lowercased())}")

    func limiters(_ count: Int) throws -> [RedisServerAPIRateLimiter] {
        try (0..<count).map { _ in
            RedisServerAPIRateLimiter(
                connection: try RedisConnection(configuration: RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort)),
                keys: keys)
        }
    }

    /// Calls let through over `seconds`, asking every 10 ms round-robin across `limiters`.
    func granted(
        _ limiters: [RedisServerAPIRateLimiter], endpoint: ServerAPIEndpoint, environment: AppStoreEnvironment, seconds: Int,
        app: String = "com.example.a"
    )
        throws -> Int
    {
        var count = 0
        for step in 0..<(seconds * 100) {
            let now = start.addingTimeInterval(Double(step) / 100)
            // Every caller asks several times per tick: a backlog, not a trickle.
            for limiter in limiters {
                for _ in 0..<3 where try limiter.reserve(app: app, endpoint: endpoint, environment: environment, now: now) == nil { count += 1 }
            }
        }
        return count
    }

    @Test("Three processes share one bucket: at most a second's burst plus Apple's rate, production and sandbox (10%) apart")
    func sharedBucket() throws {
        let lanes = try limiters(3)
        // 10 s at 50/s with a burst of 50: at most 50 + 500.
        let production = try granted(lanes, endpoint: .transactionHistory, environment: .production, seconds: 10)
        #expect(production <= 550)
        #expect(production >= 540)
        let sandbox = try granted(lanes, endpoint: .transactionHistory, environment: .sandbox, seconds: 10)
        #expect(sandbox <= 55)
        #expect(sandbox >= 50)
        let refunds = try granted(lanes, endpoint: .refundHistory, environment: .production, seconds: 10, app: "com.example.b")
        #expect(refunds <= 110 && refunds >= 105)
    }

    @Test("When the bucket is empty the limiter says when a token will be there, and that time is honest")
    func waitTime() throws {
        let limiter = try limiters(1)[0]
        // Sandbox order look-up: 1/s with a burst of one.
        #expect(try limiter.reserve(app: "w", endpoint: .lookUpOrderID, environment: .sandbox, now: start) == nil)
        let wait = try #require(try limiter.reserve(app: "w", endpoint: .lookUpOrderID, environment: .sandbox, now: start))
        #expect(wait > start && wait <= start.addingTimeInterval(1))
        #expect(try limiter.reserve(app: "w", endpoint: .lookUpOrderID, environment: .sandbox, now: wait.addingTimeInterval(-0.2)) != nil)
        #expect(try limiter.reserve(app: "w", endpoint: .lookUpOrderID, environment: .sandbox, now: wait) == nil)
    }

    @Test("After a 429 every endpoint of the app waits until Retry-After, a shorter pause does not shorten it, other apps go on")
    func pause() throws {
        let (first, second) = try {
            let pair = try limiters(2)
            return (pair[0], pair[1])
        }()
        let until = start.addingTimeInterval(30)
        try first.pause(app: "com.example.p", environment: .production, until: until, now: start)
        try first.pause(app: "com.example.p", environment: .production, until: start.addingTimeInterval(5), now: start)
        for endpoint in ServerAPIEndpoint.allCases {
            let wait = try second.reserve(app: "com.example.p", endpoint: endpoint, environment: .production, now: start.addingTimeInterval(10))
            #expect(wait == until)
        }
        #expect(try second.reserve(app: "com.example.p", endpoint: .transactionInfo, environment: .sandbox, now: start) == nil)
        #expect(try second.reserve(app: "com.example.other", endpoint: .transactionInfo, environment: .production, now: start) == nil)
        #expect(
            try second.reserve(app: "com.example.p", endpoint: .transactionInfo, environment: .production, now: until.addingTimeInterval(0.001))
                == nil)
    }
}
