import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The scheduler's claim against real Postgres, with notification-aware re-polls: what the worker's
/// notification path writes, the skip, the safety net, and the fallback when notifications stop.
@Suite("Postgres subscription schedule: notification-aware re-polls", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct RepollScheduleTests {
    let connection: PostgresConnection
    let app: AppRecord
    static let base = Date(timeIntervalSince1970: 1_800_000_000)
    static let hour: TimeInterval = 3600
    let net = RepollSafetyNet(freshWindow: .seconds(6 * 3600), grace: .seconds(86_400))

    init() throws {
        (_, connection, app) = try TestSystem.newApp(named: "repoll-net", bundleID: "com.example.net")
    }

    var schedule: PostgresSubscriptionSchedule { PostgresSubscriptionSchedule(connection: connection, apps: [app.id]) }

    func state(_ original: String, expires: Date, observed: Date) -> SubscriptionState {
        SubscriptionState(
            originalTransactionID: original, productID: "monthly", status: .active, expiresAt: expires,
            purchasedAt: expires.addingTimeInterval(-30 * 86_400), latestTransactionID: "\(original)-t", observedAt: observed)
    }

    /// A validation from the door (origin api): the subscription, due at `nextPoll`.
    func validation(_ original: String, expires: Date, nextPoll: Date, at: Date) -> ValidationRecord {
        let envelope = JobEnvelope(
            id: JobID.make(), appID: app.id, enqueuedAt: at, origin: .api,
            payload: .receipt(
                ReceiptJob(receipt: "MIIreceipt-\(original)", style: .unified, bundleID: "com.example.net", environment: "sandbox")))
        return ValidationRecord(
            envelope: envelope, status: .valid, environment: "sandbox", appleStatus: 0, purchases: [], latestReceipt: nil, calls: [],
            validatedAt: at,
            subscriptions: [PlannedSubscription(state: state(original, expires: expires, observed: at), nextPollAt: nextPoll)])
    }

    /// A V2 notification Apple posted (or the history sweep recovered), stating the same subscription.
    func notification(
        _ original: String, expires: Date, nextPoll: Date, at: Date, version: NotificationVersion = .v2, origin: JobOrigin = .apple
    ) -> ValidationRecord {
        let uuid = UUID().uuidString
        let envelope = JobEnvelope(
            id: JobID.make(), appID: app.id, enqueuedAt: at, origin: origin,
            payload: .notification(NotificationJob(notificationID: uuid, body: "eyJ", environment: "sandbox")))
        var record = ValidationRecord(
            envelope: envelope, status: .valid, environment: "sandbox", appleStatus: nil, purchases: [], latestReceipt: nil, calls: [],
            validatedAt: at,
            subscriptions: [PlannedSubscription(state: state(original, expires: expires, observed: at), nextPollAt: nextPoll)])
        record.notification = AppleNotification(
            version: version, uuid: uuid, type: "DID_RENEW", signedDate: at, environment: "sandbox",
            transaction: .object(["originalTransactionId": .string(original)]))
        return record
    }

    func save(_ records: [ValidationRecord]) throws {
        let results = try PostgresReceiptStore(connection: connection).save(records)
        for result in results { if case .failure(let failure) = result { Issue.record("store refused: \(failure)") } }
    }

    func row(_ original: String) throws -> PostgresRow? {
        try connection.query(
            """
            SELECT next_poll_at, skipped_poll_at, notified_at, poll_seq FROM subscriptions
            WHERE app_id = \(app.id) AND original_transaction_id = \(original)
            """
        ).rows.first
    }

    func appNotifiedAt() throws -> Date? {
        try connection.query(
            "SELECT last_notification_at FROM app_notification_activity WHERE app_id = \(app.id) AND environment = 'sandbox'"
        ).rows.first?.date("last_notification_at")
    }

    /// One claim that queues everything passed to it.
    func claim(at now: Date) throws -> RepollClaim {
        try schedule.claimDue(now: now, limit: 100, lease: now.addingTimeInterval(3600), safetyNet: net) { $0.count }
    }

    @Test("A V2 notification marks its subscription and its app in the same transaction; V1 and the history sweep mark no app")
    func notificationWrites() throws {
        let original = "n-\(UUID().uuidString.prefix(8))"
        let expires = Self.base.addingTimeInterval(10 * 86_400)
        try save([notification(original, expires: expires, nextPoll: expires, at: Self.base, origin: .history)])
        #expect(try row(original)?.date("notified_at") == Self.base)
        #expect(try appNotifiedAt() == nil, "a recovered notification says Apple's deliveries fail")
        try save([notification(original, expires: expires, nextPoll: expires, at: Self.base.addingTimeInterval(10), version: .v1)])
        #expect(try row(original)?.date("notified_at") == Self.base, "a V1 notification is no V2 coverage")
        #expect(try appNotifiedAt() == nil)

        try save([notification(original, expires: expires, nextPoll: expires, at: Self.base.addingTimeInterval(20))])
        #expect(try appNotifiedAt() == Self.base.addingTimeInterval(20))
        // Within a minute the app's row is not written again (no hot row for the workers); after, it is.
        try save([notification(original, expires: expires, nextPoll: expires, at: Self.base.addingTimeInterval(50))])
        #expect(try appNotifiedAt() == Self.base.addingTimeInterval(20))
        #expect(try row(original)?.date("notified_at") == Self.base.addingTimeInterval(50))
        try save([notification(original, expires: expires, nextPoll: expires, at: Self.base.addingTimeInterval(200))])
        #expect(try appNotifiedAt() == Self.base.addingTimeInterval(200))
        // A validation from the door keeps the subscription's notification time.
        try save([validation(original, expires: expires, nextPoll: expires, at: Self.base.addingTimeInterval(300))])
        #expect(try row(original)?.date("notified_at") == Self.base.addingTimeInterval(200))
    }

    @Test("Covered: not polled before its expiry, polled as a safety net after expiry plus the grace; uncovered ones as today")
    func skipThenSafetyNet() throws {
        let covered = "c-\(UUID().uuidString.prefix(8))"
        let plain = "p-\(UUID().uuidString.prefix(8))"
        let expires = Self.base.addingTimeInterval(2 * 86_400)
        let planned = expires.addingTimeInterval(-86_400)
        try save([
            validation(covered, expires: expires, nextPoll: planned, at: Self.base),
            validation(plain, expires: expires, nextPoll: planned, at: Self.base),
        ])
        // The notification reaches one of them (and it is the app's latest).
        try save([notification(covered, expires: expires, nextPoll: planned, at: Self.base.addingTimeInterval(60))])
        #expect(try claim(at: planned.addingTimeInterval(-1)).claimed == 0, "nothing due yet")

        // Its app's notifications are arriving: the poll before the expiry is skipped, the other made.
        let now = planned.addingTimeInterval(1)
        let appFresh = now.addingTimeInterval(-3600)
        _ = try connection.query("UPDATE app_notification_activity SET last_notification_at = \(appFresh) WHERE app_id = \(app.id)")
        let first = try claim(at: now)
        #expect(first.claimed == 2)
        #expect(first.queued.map(\.originalTransactionID) == [plain])
        #expect(first.skippedApps == [app.id])
        let skipped = try #require(try row(covered))
        #expect(skipped.date("next_poll_at") == expires.addingTimeInterval(86_400))
        #expect(skipped.date("skipped_poll_at") == planned)
        #expect(skipped.int("poll_seq") == 0)
        #expect(try claim(at: now).claimed == 0, "a skip is not claimed again at once")

        // The renewal's notification never came: once expiry plus the grace has passed, the safety net polls.
        let safety = expires.addingTimeInterval(86_400 + 1)
        _ = try connection.query("UPDATE app_notification_activity SET last_notification_at = \(safety) WHERE app_id = \(app.id)")
        let net = try claim(at: safety)
        #expect(net.queued.map(\.originalTransactionID).contains(covered))
        #expect(net.skippedApps.isEmpty)
        let polled = try #require(try row(covered))
        #expect(polled.int("poll_seq") == 1)
        #expect(polled.date("skipped_poll_at") == nil)
    }

    @Test("A subscription Apple told of only in a V2 notification re-polls through the Server API whatever its app's backend; a V1 one as a receipt")
    func notificationOnlySubscriptionsRepollAtTheServerAPI() throws {
        let v2 = "v2-\(UUID().uuidString.prefix(8))"
        let v1 = "v1-\(UUID().uuidString.prefix(8))"
        let receipt = "r-\(UUID().uuidString.prefix(8))"
        let expires = Self.base.addingTimeInterval(10 * 86_400)
        var signed = notification(v2, expires: expires, nextPoll: Self.base, at: Self.base)
        signed.envelope.payload = .notification(
            NotificationJob(notificationID: UUID().uuidString, body: "eyJhbGciOiJFUzI1NiJ9.eyJ9.c2ln", environment: "sandbox"))
        var old = notification(v1, expires: expires, nextPoll: Self.base, at: Self.base, version: .v1)
        old.envelope.payload = .notification(NotificationJob(notificationID: UUID().uuidString, body: "MIIlatest-receipt", environment: "sandbox"))
        try save([signed, old, validation(receipt, expires: expires, nextPoll: Self.base, at: Self.base)])
        let stored = try connection.query(
            "SELECT s.original_transaction_id AS id, r.source FROM subscriptions s JOIN receipts r ON r.id = s.receipt_id WHERE s.app_id = \(app.id)"
        ).rows
        #expect(stored.first { $0.string("id") == v2 }?.string("source") == "notification")
        // Past the expiry and the grace: the V2-covered one is polled too (its safety net).
        let now = expires.addingTimeInterval(86_400 + 1)
        var queued: [DueSubscription] = []
        _ = try schedule.claimDue(now: now, limit: 100, lease: now.addingTimeInterval(3600), safetyNet: net) {
            queued = $0
            return $0.count
        }
        let sources = Dictionary(uniqueKeysWithValues: queued.map { ($0.originalTransactionID, $0.source) })
        #expect(sources == [v2: .signedTransaction, v1: .receipt, receipt: .receipt])
    }

    @Test("An app whose notifications stopped: the polls it passed over come back, today's schedule")
    func fallback() throws {
        let original = "f-\(UUID().uuidString.prefix(8))"
        let expires = Self.base.addingTimeInterval(3 * 86_400)
        let planned = expires.addingTimeInterval(-86_400)
        try save([notification(original, expires: expires, nextPoll: planned, at: planned.addingTimeInterval(-3600))])
        let skipped = try claim(at: planned)
        #expect(skipped.skippedApps == [app.id] && skipped.queued.isEmpty)
        #expect(try row(original)?.date("next_poll_at") == expires.addingTimeInterval(86_400))

        // Still within the window: nothing. Past it (no notification for over 6 h): the skipped poll is back, and due.
        #expect(try claim(at: planned.addingTimeInterval(4 * 3600)).claimed == 0)
        let stale = planned.addingTimeInterval(5 * 3600 + 1)
        let back = try claim(at: stale)
        #expect(back.queued.map(\.originalTransactionID) == [original])
        #expect(back.skippedApps.isEmpty)
        #expect(try row(original)?.int("poll_seq") == 1)
        #expect(try schedule.countDue(now: stale, limit: 100) == 0)
    }
}
