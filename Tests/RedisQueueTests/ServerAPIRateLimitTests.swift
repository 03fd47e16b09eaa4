import Foundation
import Hiredis
import ReceiptCore
import ReceiptTesting
import RedisJobQueue
import SystemTesting
import Testing

/// The Server API's shared token bucket against a real Redis: several limiters, each on its own
/// connection like the worker processes of one deployment, under one unique prefix.
@Suite("Server API rate limit on Redis", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
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
                for _ in 0..<3
                where try limiter.reserve(app: app, endpoint: endpoint, environment: environment, purpose: .validation, now: now) == nil {
                    count += 1
                }
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
        #expect(try limiter.reserve(app: "w", endpoint: .lookUpOrderID, environment: .sandbox, purpose: .validation, now: start) == nil)
        let wait = try #require(try limiter.reserve(app: "w", endpoint: .lookUpOrderID, environment: .sandbox, purpose: .validation, now: start))
        #expect(wait > start && wait <= start.addingTimeInterval(1))
        #expect(
            try limiter.reserve(app: "w", endpoint: .lookUpOrderID, environment: .sandbox, purpose: .validation, now: wait.addingTimeInterval(-0.2))
                != nil)
        #expect(try limiter.reserve(app: "w", endpoint: .lookUpOrderID, environment: .sandbox, purpose: .validation, now: wait) == nil)
    }

    @Test("Booking ahead: a backlog gets distinct slots one token apart, within the window only, and the rate still holds")
    func booking() throws {
        let lanes = try limiters(2)
        let app = "com.example.book"
        // Production history: 50/s, a burst of 50. 300 calls at one instant, booking 2 s ahead.
        var now = 0
        var booked: [Date] = []
        var later: [Date] = []
        for index in 0..<300 {
            switch try lanes[index % 2].reserve(
                app: app, endpoint: .transactionHistory, environment: .production, purpose: .validation, now: start, bookingAhead: 2)
            {
            case .now: now += 1
            case .booked(let at): booked.append(at)
            case .later(let at): later.append(at)
            }
        }
        #expect(now == 50, "the burst goes at once")
        #expect(booked.count == 100, "2 s of tokens at 50/s are booked")
        #expect(Set(booked).count == booked.count, "every booked call has its own slot")
        #expect(booked.max()! <= start.addingTimeInterval(2) && booked.min()! > start)
        let sorted = booked.sorted()
        #expect(zip(sorted, sorted.dropFirst()).allSatisfy { abs($1.timeIntervalSince($0) - 0.02) < 0.0015 }, "one token (20 ms) apart")
        #expect(later.count == 150 && later.allSatisfy { $0 > start.addingTimeInterval(2) }, "the rest asks again after the window")
        // The bookings were real: at 2 s nothing is left to take at once, at 3 s one second's worth is.
        #expect(
            try lanes[0].reserve(
                app: app, endpoint: .transactionHistory, environment: .production, purpose: .validation, now: start.addingTimeInterval(2)) != nil)
        var granted = 0
        for _ in 0..<100
        where try lanes[1].reserve(
            app: app, endpoint: .transactionHistory, environment: .production, purpose: .validation, now: start.addingTimeInterval(3)) == nil
        {
            granted += 1
        }
        #expect(granted == 49 || granted == 50, "a second after the bookings, a second's tokens: \(granted)")
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
            let wait = try second.reserve(
                app: "com.example.p", endpoint: endpoint, environment: .production, purpose: .validation, now: start.addingTimeInterval(10))
            #expect(wait == until)
        }
        #expect(try second.reserve(app: "com.example.p", endpoint: .transactionInfo, environment: .sandbox, purpose: .validation, now: start) == nil)
        #expect(
            try second.reserve(app: "com.example.other", endpoint: .transactionInfo, environment: .production, purpose: .validation, now: start)
                == nil)
        #expect(
            try second.reserve(
                app: "com.example.p", endpoint: .transactionInfo, environment: .production, purpose: .validation, now: until.addingTimeInterval(0.001)
            )
                == nil)
    }

    @Test("An hour's budget: deferrable work stops at its share and waits for the next hour, validations go on to the limit")
    func hourlyBudget() throws {
        // Sandbox order look-up: 1/s, so 3,600 an hour; deferrable work may spend 0.1 % of it (3).
        let limiter = RedisServerAPIRateLimiter(
            connection: try RedisConnection(configuration: RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort)),
            keys: keys, budget: HourlyCallBudget(deferrableShare: 0.001))
        let hourStart = Date(timeIntervalSince1970: (start.timeIntervalSince1970 / 3600).rounded(.down) * 3600)
        let nextHour = hourStart.addingTimeInterval(3600)
        var at = hourStart.addingTimeInterval(60)
        func ask(_ purpose: ApplePurpose) throws -> ServerAPISlot {
            // A second apart: the token bucket always has a token, so only the budget can refuse.
            at = at.addingTimeInterval(1)
            return try limiter.reserve(
                app: "com.example.h", endpoint: .lookUpOrderID, environment: .sandbox, purpose: purpose, now: at, bookingAhead: 0)
        }
        for purpose in [ApplePurpose.repoll, .import, .historySweep] { #expect(try ask(purpose) == .now) }
        for purpose in [ApplePurpose.repoll, .import, .historySweep] {
            #expect(try ask(purpose) == .later(nextHour), "\(purpose) waits for the next hour once the deferrable share is spent")
        }
        // A validation and support still go: the share is deferrable work's only.
        #expect(try ask(.validation) == .now)
        #expect(try ask(.support) == .now)
        // Other endpoints of the app, and the production hour, are counted apart.
        #expect(
            try limiter.reserve(
                app: "com.example.h", endpoint: .refundHistory, environment: .sandbox, purpose: .repoll, now: at, bookingAhead: 0) == .now)
        #expect(
            try limiter.reserve(
                app: "com.example.h", endpoint: .lookUpOrderID, environment: .production, purpose: .repoll, now: at, bookingAhead: 0) == .now)
        // A new hour, a new budget.
        #expect(
            try limiter.reserve(
                app: "com.example.h", endpoint: .lookUpOrderID, environment: .sandbox, purpose: .repoll, now: nextHour, bookingAhead: 0) == .now)
    }

    @Test("The ledger reads what every process was granted: per endpoint and purpose, this hour and in the last whole minute")
    func ledger() async throws {
        let lanes = try limiters(2)
        let minuteStart = Date(timeIntervalSince1970: (start.timeIntervalSince1970 / 60).rounded(.down) * 60)
        // 30 validations and 10 re-polls of statuses from two processes in one minute, 5 history pages in the next.
        for index in 0..<40 {
            let purpose: ApplePurpose = index < 30 ? .validation : .repoll
            #expect(
                try lanes[index % 2].reserve(
                    app: "com.example.l", endpoint: .subscriptionStatuses, environment: .production, purpose: purpose,
                    now: minuteStart.addingTimeInterval(Double(index)), bookingAhead: 0) == .now)
        }
        for index in 0..<5 {
            _ = try lanes[0].reserve(
                app: "com.example.l", endpoint: .transactionHistory, environment: .production, purpose: .import,
                now: minuteStart.addingTimeInterval(60 + Double(index)), bookingAhead: 0)
        }
        // A call the bucket refused is not counted.
        #expect(
            try lanes[1].reserve(
                app: "com.example.l", endpoint: .lookUpOrderID, environment: .sandbox, purpose: .support, now: minuteStart, bookingAhead: 0)
                == .now)
        #expect(
            try lanes[1].reserve(
                app: "com.example.l", endpoint: .lookUpOrderID, environment: .sandbox, purpose: .support, now: minuteStart, bookingAhead: 0)
                != .now)
        let pool = RedisConnectionPool(configuration: RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort), size: 1)
        defer { pool.close() }
        let ledger = RedisAppleCallLedger(pool: pool, keys: keys)
        let read = try await ledger.usage(apps: ["com.example.l", "com.example.idle"], now: minuteStart.addingTimeInterval(70))
        // One usage per app and environment, in the order asked; an app that made no call has no line.
        #expect(read.map(\.app) == ["com.example.l", "com.example.l", "com.example.idle", "com.example.idle"])
        #expect(read.map(\.environment) == [.production, .sandbox, .production, .sandbox])
        #expect(read[2].lines.isEmpty && read[3].lines.isEmpty)
        let usage = read[0]
        #expect(usage.hour(.subscriptionStatuses) == 40)
        #expect(usage.hour(.transactionHistory) == 5)
        #expect(usage.lines.contains(.init(endpoint: .subscriptionStatuses, purpose: .validation, hour: 30, lastMinute: 30)))
        #expect(usage.lines.contains(.init(endpoint: .subscriptionStatuses, purpose: .repoll, hour: 10, lastMinute: 10)))
        // The history pages are in the current minute, not yet the last whole one.
        #expect(usage.lines.contains(.init(endpoint: .transactionHistory, purpose: .import, hour: 5, lastMinute: 0)))
        #expect(abs(usage.perSecond(.subscriptionStatuses) - 40.0 / 60) < 0.001)
        let sandbox = try await ledger.usage(apps: ["com.example.l"], now: minuteStart.addingTimeInterval(1))[1]
        #expect(sandbox.lines == [.init(endpoint: .lookUpOrderID, purpose: .support, hour: 1, lastMinute: 0)])
    }
}
