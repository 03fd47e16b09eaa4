import Foundation
import Libpq
import MockAppStore
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// Notification-aware re-polls through the whole system: the mock App Store renews a StoreKit 2
/// subscription and posts `DID_RENEW` to the door → a worker applies it → the scheduler (on a mock
/// clock) skips the poll before the expiry, polls as a safety net after the expected renewal plus
/// the grace, and falls back to today's schedule once the app's notifications stop arriving.
@Suite("End to end: re-polls of subscriptions that notifications cover", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct NotificationAwareRepollTests {
    static let day: TimeInterval = 86_400

    /// A system whose scheduler runs on `clock`, a daily (sandbox-short) subscription of a user, and
    /// its renewal notified: the subscription as the entitlement API shows it then.
    func renewedByNotification(
        window: Int, grace: Int, clock: CountingClock
    ) async throws -> (system: TestSystem, original: String, expires: Date, planned: Date) {
        let system = try await TestSystem.start(
            environment: ["REPOLL_NOTIFICATIONS_FRESH_WINDOW_SECONDS": String(window), "REPOLL_SAFETY_NET_GRACE_SECONDS": String(grace)],
            schedulerClock: clock.closure)
        let notifications = NotificationTests()
        _ = try notifications.subscribe(system)
        let original = try await notifications.purchase(system, user: "net-user", product: "com.example.monthly", days: 1)
        let (_, bought) = try await system.get(path: "/client/subscriptions/\(original)")
        let firstExpiry = try #require(bought?["expires_date"]?["ms"]?.intValue)

        try system.mock.state.notifications.event(type: "DID_RENEW", transactionID: original, environment: .sandbox)
        var current: JSONValue?
        let renewed = try await eventually {
            current = try await system.get(path: "/client/subscriptions/\(original)").1
            return (current?["expires_date"]?["ms"]?.intValue ?? 0) > firstExpiry
        }
        #expect(renewed, "the DID_RENEW notification was applied")
        let expires = try #require(current?["expires_date"]?["ms"]?.intValue)
        let planned = try #require(current?["next_poll_at"]?["ms"]?.intValue)
        #expect(planned < expires, "today's schedule: a poll shortly before the expiry")
        return (system, original, Date(timeIntervalSince1970: Double(expires) / 1000), Date(timeIntervalSince1970: Double(planned) / 1000))
    }

    func repolls(_ system: TestSystem, _ outcome: String) -> Double {
        system.metric("receiptq_repolls_total", ["app": system.app.id.canonical, "outcome": outcome]) ?? 0
    }

    /// How many re-polls the scheduler queued for the subscription (its poll counter). Whether the
    /// re-poll of a StoreKit 2 subscription then succeeds is the worker's business, not the schedule's.
    func pollSequence(_ system: TestSystem, _ original: String) throws -> Int? {
        let connection = try system.postgres()
        defer { connection.close() }
        return try connection.query(
            "SELECT poll_seq FROM subscriptions WHERE app_id = \(system.app.id) AND original_transaction_id = \(original)"
        ).rows.first?.int("poll_seq")
    }

    /// Lets the scheduler go round a whole tick at the clock's time.
    func tick(_ clock: CountingClock) async throws {
        let reads = clock.reads
        #expect(try await eventually { clock.reads >= reads + CountingClock.readsPerTick })
    }

    @Test("A fresh notification: no re-poll before the expiry; one after the expected renewal plus the grace")
    func safetyNet() async throws {
        let mock = MockClock(start: Date())
        let clock = CountingClock(mock)
        // A window longer than the test's clock jumps: the app's notifications count as arriving throughout.
        let (system, original, expires, planned) = try await renewedByNotification(window: 30 * 86_400, grace: 86_400, clock: clock)
        defer { Task { await system.stop() } }

        // Today's poll before the expiry comes due: skipped, no call to Apple.
        mock.advance(to: planned.addingTimeInterval(1))
        #expect(try await eventually { repolls(system, "skipped") == 1 }, "the poll before the expiry was skipped")
        #expect(repolls(system, "made") == 0)
        let (_, skipped) = try await system.get(path: "/client/subscriptions/\(original)")
        let safetyNet = expires.addingTimeInterval(Self.day)
        #expect(skipped?["next_poll_at"]?["ms"]?.intValue == Int((safetyNet.timeIntervalSince1970 * 1000).rounded()))

        // Past the expiry, within the grace: still nothing.
        mock.advance(to: safetyNet.addingTimeInterval(-60))
        try await tick(clock)
        #expect(repolls(system, "made") == 0 && repolls(system, "skipped") == 1)
        #expect(try pollSequence(system, original) == 0)

        // The grace has passed with no renewal notified: the safety net polls Apple once.
        mock.advance(to: safetyNet.addingTimeInterval(1))
        #expect(try await eventually { try pollSequence(system, original) == 1 }, "the safety net queued a re-poll")
        // Counted once the claim's transaction returned, a moment after its row is visible.
        #expect(try await eventually { repolls(system, "made") == 1 })
        #expect(repolls(system, "skipped") == 1)
    }

    @Test("An app whose notifications stopped arriving: the poll passed over comes back (today's schedule)")
    func notificationsStopped() async throws {
        let mock = MockClock(start: Date())
        let clock = CountingClock(mock)
        // Two days: the renewal's notification is fresh when the poll before the (day-long period's) expiry comes due.
        let window: TimeInterval = 2 * Self.day
        let (system, original, _, planned) = try await renewedByNotification(window: Int(window), grace: 86_400, clock: clock)
        defer { Task { await system.stop() } }
        let notifiedBy = Date()

        mock.advance(to: planned.addingTimeInterval(1))
        #expect(try await eventually { repolls(system, "skipped") == 1 })
        #expect(try pollSequence(system, original) == 0)

        // No notification for longer than the window: the subscription is polled as if none had come.
        mock.advance(to: notifiedBy.addingTimeInterval(window + 60))
        #expect(try await eventually { try pollSequence(system, original) == 1 }, "the fallback queued a re-poll")
        // Counted once the claim's transaction returned, a moment after its row is visible.
        #expect(try await eventually { repolls(system, "made") == 1 })
        #expect(repolls(system, "skipped") == 1)
    }
}
