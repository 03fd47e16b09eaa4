import DevTools
import Foundation
import Hiredis
import Libpq
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Testing

/// Ten thousand notifications, a fifth of them Apple's repeats, in shuffled order, queued as the
/// endpoint queues them (each repeat its own job: the Redis dedupe of the endpoint is tested
/// elsewhere, so that here Postgres's is) and applied by the workers: the end state is exactly that
/// of the ordered stream, each notification stored once. Queued straight into Redis: ten thousand
/// HTTP requests through the debug build's JWS checks took the two cores from the other suites.
/// In the crash-recovery suite's serialized run: the heavy process tests must not overlap, or the
/// two cores starve the timing bounds of the suites beside them.
extension CrashRecoveryTests {
    static let burstSubscriptions = 200
    static let burstSteps = 40
    static let burstDuplicates = 2000

    /// What step `step` of a subscription says, and the status Apple gives with it.
    static func burstKind(subscription: Int, step: Int) -> (type: String, subtype: String?, status: Int, autoRenew: Int) {
        // The last step differs by subscription, so the end states differ too.
        switch (step == burstSteps - 1 ? subscription : step) % 5 {
        case 0: ("DID_RENEW", nil, 1, 1)
        case 1: ("DID_FAIL_TO_RENEW", "GRACE_PERIOD", 4, 1)
        case 2: ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", 1, 0)
        case 3: ("EXPIRED", "VOLUNTARY", 2, 0)
        default: ("REFUND", nil, 5, 0)
        }
    }

    @Test("10,000 jobs (8,000 notifications and 2,000 repeats) in shuffled order end in the ordered stream's state, each stored once")
    func shuffledBurst() async throws {
        let system = try await TestSystem.start(environment: ["WORKER_CONCURRENCY": "64"])
        defer { Task { await system.stop() } }
        let connection = try system.postgres()
        defer { connection.close() }
        let authority = try TestSystem.sharedJWSAuthority.get()
        let base = (Date().timeIntervalSince1970 * 1000).rounded() - 86_400_000 * Double(Self.burstSteps)
        let day = 86_400_000.0
        // Apple's transaction ids are unique across apps, and so is the ledger's key: a fresh range per run.
        let ids = Int.random(in: 1...9_000_000) * 1_000_000
        var renewals: [String: String] = [:]
        var bodies: [(uuid: String, jws: String)] = []
        bodies.reserveCapacity(Self.burstSubscriptions * Self.burstSteps)
        for subscription in 0..<Self.burstSubscriptions {
            let original = String(ids + subscription * 1000)
            for step in 0..<Self.burstSteps {
                let kind = Self.burstKind(subscription: subscription, step: step)
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
                let renewalKey = "\(original)-\(kind.autoRenew)"
                let renewal =
                    try renewals[renewalKey]
                    ?? authority.sign(
                        .object([
                            "originalTransactionId": .string(original), "autoRenewStatus": .number(Double(kind.autoRenew)),
                            "productId": .string("com.example.monthly"), "environment": .string("Sandbox"),
                        ]))
                renewals[renewalKey] = renewal
                let uuid = UUID().uuidString.lowercased()
                var payload: [String: JSONValue] = [
                    "notificationType": .string(kind.type), "notificationUUID": .string(uuid),
                    // Strictly increasing per subscription: the order the stream has.
                    "signedDate": .number(base + Double(step) * day + 2), "version": .string("2.0"),
                    "data": .object([
                        "bundleId": .string(system.app.bundleID), "environment": .string("Sandbox"), "status": .number(Double(kind.status)),
                        "signedTransactionInfo": .string(try authority.sign(.object(transaction))),
                        "signedRenewalInfo": .string(renewal),
                    ]),
                ]
                if let subtype = kind.subtype { payload["subtype"] = .string(subtype) }
                bodies.append((uuid, try authority.sign(.object(payload))))
            }
        }
        var jobs = bodies
        for _ in 0..<Self.burstDuplicates { jobs.append(bodies.randomElement()!) }
        jobs.shuffle()
        let redis = try system.redis()
        defer { redis.close() }
        for batch in stride(from: 0, to: jobs.count, by: 500) {
            _ = try redis.pipeline(
                bytes: jobs[batch..<min(batch + 500, jobs.count)].map { job in
                    let envelope = JobEnvelope(
                        id: JobID.make(), appID: system.app.id, enqueuedAt: Date(), origin: .apple,
                        payload: .notification(
                            NotificationJob(notificationID: job.uuid, body: job.jws, bundleID: system.app.bundleID, environment: "sandbox")))
                    return [Array("LPUSH".utf8), Array(system.configuration.keys.queue("notification").utf8), envelope.encoded()]
                })
        }
        let stored = try await eventually(timeout: .seconds(180)) {
            try await connection.query("SELECT count(*) AS n FROM notifications WHERE app_id = \(system.app.id)").rows.first?.int("n")
                == Self.burstSubscriptions * Self.burstSteps
        }
        #expect(stored, "every notification stored")
        // Every copy settled, the duplicates too: nothing left that could store another row.
        #expect(
            try await eventually(timeout: .seconds(60)) { try system.queuesIdle([.notification]) },
            "\((try? system.heldJobs([.notification])).map { "\($0)" } ?? "?")")
        #expect(
            try await connection.query("SELECT count(*) AS n FROM notifications WHERE app_id = \(system.app.id)").rows.first?.int("n")
                == Self.burstSubscriptions * Self.burstSteps, "and each once")

        // The ordered stream's end: each subscription as its last notification says.
        let rows = try await connection.query(
            """
            SELECT original_transaction_id, state, latest_transaction_id, expires_at, auto_renew_status, receipt_id
            FROM subscriptions WHERE app_id = \(system.app.id)
            """
        ).rows
        #expect(rows.count == Self.burstSubscriptions)
        var mismatches: [String] = []
        for row in rows {
            guard let original = row.string("original_transaction_id"), let number = Int(original) else { continue }
            let subscription = (number - ids) / 1000
            let last = Self.burstKind(subscription: subscription, step: Self.burstSteps - 1)
            let expected: String =
                switch last.status {
                case 1: "active"
                case 2: "expired"
                case 4: "grace"
                default: "revoked"
                }
            let latest = String(ids + subscription * 1000 + Self.burstSteps)
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
        #expect(ledger.int("n") == Self.burstSubscriptions * Self.burstSteps)
        let refunds = (0..<Self.burstSubscriptions).reduce(0) { total, subscription in
            total + (0..<Self.burstSteps).filter { Self.burstKind(subscription: subscription, step: $0).type == "REFUND" }.count
        }
        #expect(ledger.int("refunded") == refunds)
        #expect(ledger.int("receipts") == Self.burstSubscriptions)
    }
}
