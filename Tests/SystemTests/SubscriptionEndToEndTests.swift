import DevTools
import Foundation
import Hiredis
import Libpq
import MockAppStore
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Testing

/// Subscriptions through the whole system: API → worker → Postgres → scheduler → re-poll → entitlement API.
@Suite("End to end: subscriptions are re-polled and renewals show up", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct SubscriptionEndToEndTests {
    /// A demo receipt whose subscription (sandbox-short: an hour) ends soon after `now`: long enough
    /// that a slow validation on a loaded machine still plans the poll before the expiry.
    static func shortSubscription(_ system: TestSystem, now: Date) throws -> (String, AppReceipt) {
        var receipt = ReceiptForger.demoReceipt(bundleID: system.app.bundleID, now: now)
        let start = Date(timeIntervalSince1970: (now.timeIntervalSince1970 - 60).rounded(.down))
        receipt.inApp[1].purchaseDate = start
        receipt.inApp[1].expiresDate = start.addingTimeInterval(3600)
        receipt.inApp[1].isTrialPeriod = false
        return (Data(try ReceiptForger.unified(receipt, authority: system.authority)).base64EncodedString(), receipt)
    }

    @Test("A re-poll before expiry finds the renewal the mock App Store charged, and the entitlement API shows the new expiry")
    func renewal() async throws {
        let clock = MockClock(start: Date())
        let schedulerClock = CountingClock(clock)
        let system = try await TestSystem.start(schedulerClock: schedulerClock.closure)
        defer { Task { await system.stop() } }
        let (receipt, decoded) = try Self.shortSubscription(system, now: Date())
        let subscription = decoded.inApp[1]
        let original = subscription.originalTransactionID
        let expires = try #require(subscription.expiresDate)

        let (status, body) = try await system.post(#"{"receipt":"\#(receipt)","user_identifier":"user-sub"}"#)
        #expect(status == 200)
        let receiptID = try #require(body?["id"]?.stringValue)

        // Filed as active, with a poll planned shortly before the expiry (5 % of the hour, jittered: 180–225 s).
        let (found, first) = try await system.get(path: "/client/subscriptions/\(original)")
        #expect(found == 200)
        #expect(first?["status"]?.stringValue == "active")
        #expect(first?["is_entitled"] == .bool(true))
        #expect(first?["environment"]?.stringValue == "sandbox")
        #expect(first?["product_id"]?.stringValue == subscription.productID)
        #expect(first?["user_identifier"]?.stringValue == "user-sub")
        #expect(first?["receipt_id"]?.stringValue == receiptID)
        #expect(first?["expires_date"]?["ms"]?.intValue == Int(expires.timeIntervalSince1970 * 1000))
        let planned = try #require(first?["next_poll_at"]?["ms"]?.intValue)
        let lead = Double(Int(expires.timeIntervalSince1970 * 1000) - planned) / 1000
        #expect(lead >= 180 && lead <= 225)

        // Apple charges the next period; the app sends nothing.
        let renewedUntil = expires.addingTimeInterval(3600)
        system.mock.state.addRenewal(
            InAppPurchase(
                productID: subscription.productID, transactionID: "\(original)9", originalTransactionID: original, purchaseDate: expires,
                expiresDate: renewedUntil))
        let sandboxCalls = system.mock.state.requestCount(.sandbox)

        // Nothing is due yet: the scheduler goes round (a whole tick) and queues nothing; then its
        // clock reaches the planned poll.
        let reads = schedulerClock.reads
        #expect(try await eventually { schedulerClock.reads >= reads + CountingClock.readsPerTick })
        #expect((system.metric("receiptq_repolls_enqueued_total") ?? 0) == 0, "nothing queued before it is due")
        #expect(system.mock.state.requestCount(.sandbox) == sandboxCalls)
        clock.advance(to: Date(timeIntervalSince1970: Double(planned) / 1000 + 1))

        let renewed = try await eventually(timeout: .seconds(60)) {
            let (_, current) = try await system.get(path: "/client/subscriptions/\(original)")
            return current?["expires_date"]?["ms"]?.intValue == Int(renewedUntil.timeIntervalSince1970 * 1000)
        }
        if !renewed {
            let redis = try system.redis()
            defer { redis.close() }
            let (_, current) = try await system.get(path: "/client/subscriptions/\(original)")
            let subscription = current.map { String(decoding: (try? JSONEncoder().encode($0)) ?? Data(), as: UTF8.self) } ?? "nil"
            let queued = try redis.send(["LLEN", system.configuration.keys.queue("repoll")]).int ?? -1
            Issue.record(
                "not renewed: subscription \(subscription), repoll queue \(queued), scheduler clock \(clock.now.timeIntervalSince1970), sandbox calls \(system.mock.state.requestCount(.sandbox))"
            )
        }
        let (_, current) = try await system.get(path: "/client/subscriptions/\(original)?environment=sandbox")
        #expect(current?["status"]?.stringValue == "active")
        #expect(current?["latest_transaction_id"]?.stringValue == "\(original)9")
        #expect(current?["last_polled_at"]?["ms"]?.intValue != nil)
        #expect(current?["last_poll_error"] == nil)
        #expect((current?["next_poll_at"]?["ms"]?.intValue ?? 0) > Int(expires.timeIntervalSince1970 * 1000))
        #expect(system.mock.state.requestCount(.sandbox) > sandboxCalls)

        // The scheduler's counter and the re-poll's latency, as Prometheus would scrape them.
        let scrape = try await MetricsTests.scrape(system.client, "http://127.0.0.1:\(system.apiPort)/metrics")
        #expect(scrape.value("receiptq_repolls_enqueued_total") == 1)
        #expect(scrape.value("receiptq_job_latency_seconds_count", ["kind": "repoll"]) == 1)
        #expect(scrape.value("receiptq_jobs_processed_total", ["outcome": "validated"]) == 2)

        // The renewal is in the ledger, under the receipt that was re-sent; no receipt row was added.
        let pg = try system.postgres()
        defer { pg.close() }
        let ledger = try await pg.query("SELECT receipt_id, user_identifier FROM in_app_purchases WHERE transaction_id = \("\(original)9")").rows
        #expect(ledger.map { $0.uuid("receipt_id")?.uuidString } == [UUID(uuidString: receiptID)?.uuidString])
        #expect(ledger.first?.string("user_identifier") == "user-sub")
        #expect(try await pg.query("SELECT count(*) AS n FROM receipts WHERE app_id = \(system.app.id)").rows.first?.int("n") == 1)

        // The user's listing: the subscription, and the non-consumable beside it.
        let (listed, listing) = try await system.get(path: "/client/subscriptions?user_identifier=user-sub")
        #expect(listed == 200)
        #expect(listing?["subscriptions"]?.arrayValue?.compactMap { $0["original_transaction_id"]?.stringValue } == [original])
        #expect(listing?["purchases"]?.arrayValue?.compactMap { $0["product_id"]?.stringValue } == [decoded.inApp[0].productID])
        #expect(listing?["purchases"]?.arrayValue?.first?["environment"]?.stringValue == "sandbox")
    }

    @Test("The entitlement API: 401 without a token, 422 naming the field, 404 for another app's subscription")
    func entitlementErrors() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (receipt, decoded) = try Self.shortSubscription(system, now: Date())
        #expect(try await system.post(#"{"receipt":"\#(receipt)","user_identifier":"u"}"#).0 == 200)
        let original = decoded.inApp[1].originalTransactionID

        #expect(try await system.get(path: "/client/subscriptions/\(original)", token: "rq_nope").0 == 401)
        #expect(try await system.get(path: "/client/subscriptions?user_identifier=u", token: "rq_nope").0 == 401)
        let (missing, missingBody) = try await system.get(path: "/client/subscriptions")
        #expect(missing == 422)
        #expect(missingBody?["errors"]?.arrayValue?.first?["field"]?.stringValue == "user_identifier")
        let long = String(repeating: "x", count: 256)
        #expect(try await system.get(path: "/client/subscriptions?user_identifier=\(long)").0 == 422)
        let (badEnvironment, badBody) = try await system.get(path: "/client/subscriptions/\(original)?environment=staging")
        #expect(badEnvironment == 422)
        #expect(badBody?["errors"]?.arrayValue?.first?["field"]?.stringValue == "environment")
        #expect(try await system.get(path: "/client/subscriptions/\(original)?environment=production").0 == 404)
        #expect(try await system.get(path: "/client/subscriptions/does-not-exist").0 == 404)
        let (empty, emptyBody) = try await system.get(path: "/client/subscriptions?user_identifier=nobody")
        #expect(empty == 200)
        #expect(emptyBody?["subscriptions"]?.arrayValue?.isEmpty == true)

        let pg = try system.postgres()
        defer { pg.close() }
        let other = try AppAdmin(connection: pg).addApp(name: "other-\(UUID().uuidString)", bundleID: "com.example.other", sharedSecret: nil).1
        #expect(try await system.get(path: "/client/subscriptions/\(original)", token: other).0 == 404)
        let (_, foreign) = try await system.get(path: "/client/subscriptions?user_identifier=u", token: other)
        #expect(foreign?["subscriptions"]?.arrayValue?.isEmpty == true)
    }
}
