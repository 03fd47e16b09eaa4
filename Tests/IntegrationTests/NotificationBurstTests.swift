import Curl
import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptSignature
import ReceiptTesting
import Synchronization
import Testing

/// Ten thousand notifications, a fifth of them Apple's repeats, in shuffled order, through the
/// endpoint and the workers: the end state is exactly that of the ordered stream, each
/// notification stored once.
@Suite("Notifications: a shuffled burst with duplicates", .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct NotificationBurstTests {
    static let subscriptions = 200
    static let steps = 40
    static let duplicates = 2000

    /// What step `step` of a subscription says, and the status Apple gives with it.
    static func kind(subscription: Int, step: Int) -> (type: String, subtype: String?, status: Int, autoRenew: Int) {
        // The last step differs by subscription, so the end states differ too.
        switch (step == steps - 1 ? subscription : step) % 5 {
        case 0: ("DID_RENEW", nil, 1, 1)
        case 1: ("DID_FAIL_TO_RENEW", "GRACE_PERIOD", 4, 1)
        case 2: ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", 1, 0)
        case 3: ("EXPIRED", "VOLUNTARY", 2, 0)
        default: ("REFUND", nil, 5, 0)
        }
    }

    @Test("10,000 posts (8,000 notifications and 2,000 repeats) in shuffled order end in the ordered stream's state, each stored once")
    func shuffledBurst() async throws {
        let system = try await TestSystem.start(environment: ["WORKER_CONCURRENCY": "64"])
        defer { Task { await system.stop() } }
        let connection = try system.postgres()
        defer { connection.close() }
        let token = try PostgresStoreAccess.notificationToken(connection, appID: system.app.id)
        let path = "/apple/notifications/\(system.app.name)/\(token)"
        let authority = try TestSystem.sharedJWSAuthority.get()
        let base = (Date().timeIntervalSince1970 * 1000).rounded() - 86_400_000 * Double(Self.steps)
        let day = 86_400_000.0
        // Apple's transaction ids are unique across apps, and so is the ledger's key: a fresh range per run.
        let ids = Int.random(in: 1...9_000_000) * 1_000_000
        var bodies: [[UInt8]] = []
        bodies.reserveCapacity(Self.subscriptions * Self.steps)
        for subscription in 0..<Self.subscriptions {
            let original = String(ids + subscription * 1000)
            for step in 0..<Self.steps {
                let kind = Self.kind(subscription: subscription, step: step)
                var transaction: [String: JSONValue] = [
                    "transactionId": .string(String(ids + subscription * 1000 + step + 1)), "originalTransactionId": .string(original),
                    "bundleId": .string(system.app.bundleID), "productId": .string("com.example.monthly"),
                    "purchaseDate": .number(base + Double(step) * day), "originalPurchaseDate": .number(base),
                    "expiresDate": .number(base + Double(step + 1) * day), "type": .string("Auto-Renewable Subscription"),
                    "environment": .string("Sandbox"), "signedDate": .number(base + Double(step) * day + 1),
                ]
                if kind.type == "REFUND" {
                    transaction["revocationDate"] = .number(base + Double(step) * day + 1)
                    transaction["revocationReason"] = .number(1)
                }
                let renewal: JSONValue = .object([
                    "originalTransactionId": .string(original), "autoRenewStatus": .number(Double(kind.autoRenew)),
                    "productId": .string("com.example.monthly"), "environment": .string("Sandbox"),
                ])
                var payload: [String: JSONValue] = [
                    "notificationType": .string(kind.type), "notificationUUID": .string(UUID().uuidString.lowercased()),
                    // Strictly increasing per subscription: the order the stream has.
                    "signedDate": .number(base + Double(step) * day + 2), "version": .string("2.0"),
                    "data": .object([
                        "bundleId": .string(system.app.bundleID), "environment": .string("Sandbox"), "status": .number(Double(kind.status)),
                        "signedTransactionInfo": .string(try authority.sign(.object(transaction))),
                        "signedRenewalInfo": .string(try authority.sign(renewal)),
                    ]),
                ]
                if let subtype = kind.subtype { payload["subtype"] = .string(subtype) }
                bodies.append(Array(JSONValue.object(["signedPayload": .string(try authority.sign(.object(payload)))]).encodedText.utf8))
            }
        }
        var posts = bodies
        for _ in 0..<Self.duplicates { posts.append(bodies.randomElement()!) }
        posts.shuffle()
        let shuffled = posts

        let progress = Progress()
        let url = "http://127.0.0.1:\(system.apiPort)\(path)"
        let client = system.client
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<16 {
                group.addTask {
                    while true {
                        let index = progress.next.add(1, ordering: .relaxed).oldValue
                        guard index < shuffled.count else { return }
                        let status =
                            (try? await client.send(
                                Curl.HTTPRequest(method: "POST", url: url, headers: [("Content-Type", "application/json")], body: shuffled[index])
                            ).status) ?? -1
                        progress.statuses.withLock { $0[status, default: 0] += 1 }
                    }
                }
            }
        }
        #expect(progress.statuses.withLock { $0 } == [200: shuffled.count])
        let stored = try await system.eventually(timeout: .seconds(180)) {
            try await connection.query("SELECT count(*) AS n FROM notifications WHERE app_id = \(system.app.id)").rows.first?.int("n")
                == Self.subscriptions * Self.steps
        }
        #expect(stored, "every notification stored")
        try await Task.sleep(for: .milliseconds(500))
        #expect(
            try await connection.query("SELECT count(*) AS n FROM notifications WHERE app_id = \(system.app.id)").rows.first?.int("n")
                == Self.subscriptions * Self.steps, "and each once")

        // The ordered stream's end: each subscription as its last notification says.
        let rows = try await connection.query(
            """
            SELECT original_transaction_id, state, latest_transaction_id, expires_at, auto_renew_status, receipt_id
            FROM subscriptions WHERE app_id = \(system.app.id)
            """
        ).rows
        #expect(rows.count == Self.subscriptions)
        var mismatches: [String] = []
        for row in rows {
            guard let original = row.string("original_transaction_id"), let number = Int(original) else { continue }
            let subscription = (number - ids) / 1000
            let last = Self.kind(subscription: subscription, step: Self.steps - 1)
            let expected: String =
                switch last.status {
                case 1: "active"
                case 2: "expired"
                case 4: "grace"
                default: "revoked"
                }
            let latest = String(ids + subscription * 1000 + Self.steps)
            if row.string("state") != expected || row.string("latest_transaction_id") != latest
                || row.bool("auto_renew_status") != (last.autoRenew == 1)
            {
                mismatches.append("\(original): \(row.string("state") ?? "-") \(row.string("latest_transaction_id") ?? "-")")
            }
        }
        #expect(mismatches.isEmpty, "subscriptions not in the ordered stream's state: \(mismatches.prefix(5))")
        // Every transaction once in the ledger, refunds marked; one receipt row per subscription.
        let ledger = try #require(
            try await connection.query(
                """
                SELECT count(*) AS n, count(cancellation_date) AS refunded, count(DISTINCT receipt_id) AS receipts
                FROM in_app_purchases WHERE app_id = \(system.app.id)
                """
            ).rows.first)
        #expect(ledger.int("n") == Self.subscriptions * Self.steps)
        let refunds = (0..<Self.subscriptions).reduce(0) { total, subscription in
            total + (0..<Self.steps).filter { Self.kind(subscription: subscription, step: $0).type == "REFUND" }.count
        }
        #expect(ledger.int("refunded") == refunds)
        #expect(ledger.int("receipts") == Self.subscriptions)
    }
}

/// The posting tasks' shared place in the list and what they were answered.
final class Progress: Sendable {
    let next = Atomic<Int>(0)
    let statuses = Mutex<[Int: Int]>([:])
}

/// Test access to the app's notification token (the CLI prints it; tests issue their own).
enum PostgresStoreAccess {
    static func notificationToken(_ connection: PostgresConnection, appID: UUID) throws -> String {
        try PostgresStore.AppAdmin(connection: connection).rotateNotificationToken(appID: appID)
    }
}
