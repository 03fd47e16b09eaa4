import AppStoreClient
import Curl
import DevTools
import Foundation
import Libpq
import Logging
import MockAppStore
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptScheduler
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Testing

/// App Store Server Notifications through the whole system: the mock App Store changes a purchase
/// and posts the notification (signed by its chain) to `/apple/notifications/{app}/{token}` →
/// Redis → a worker → the same ledger and subscriptions as validations → the entitlement API.
@Suite("App Store Server Notifications, end to end", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct NotificationTests {
    /// The app's notification URL, and the mock sending this app's notifications to it.
    func subscribe(_ system: TestSystem, version: String = "v2", retries: Int = 0) throws -> String {
        let connection = try system.postgres()
        defer { connection.close() }
        let token = try AppAdmin(connection: connection).rotateNotificationToken(appID: system.app.id)
        let path = "/apple/notifications/\(system.app.name)/\(token)"
        system.mock.state.notifications.setTarget(
            .init(
                url: "http://127.0.0.1:\(system.apiPort)\(path)", version: version, password: system.app.sharedSecret, retries: retries,
                retryDelaySeconds: 0.2),
            bundleID: system.app.bundleID)
        return path
    }

    /// A StoreKit 2 purchase known to the mock and validated by receiptq for `user` (priced and
    /// with `fields` as ``TestSystem/signedTransaction(product:days:environment:price:fields:)`` signs them).
    func purchase(
        _ system: TestSystem, user: String, product: String = "com.example.lifetime", days: Double? = nil,
        price: Money? = ReceiptForger.defaultPrice, fields: [String: JSONValue] = [:]
    ) async throws -> String {
        let (jws, payload) = try system.signedTransaction(product: product, days: days, price: price, fields: fields)
        let body = JSONValue.object(["signed_transaction": .string(jws), "user_identifier": .string(user)]).encodedText
        let (status, _) = try await system.post(body, path: "/client/transactions")
        #expect(status == 200)
        return try #require(payload["transactionId"]?.stringValue)
    }

    func entitlements(_ system: TestSystem, user: String) async throws -> JSONValue? {
        try await system.get(path: "/client/subscriptions?user_identifier=\(user)").1
    }

    func auditRows(_ system: TestSystem, type: String? = nil) throws -> [PostgresRow] {
        let connection = try system.postgres()
        defer { connection.close() }
        return try connection.query(
            """
            SELECT notification_uuid, notification_type, subtype, outcome, signed_at, payload::text AS payload, receipt_id
            FROM notifications WHERE app_id = \(system.app.id) AND (\(type)::text IS NULL OR notification_type = \(type))
            ORDER BY signed_at
            """
        ).rows
    }

    @Test("receiptq notifications test: exit 1 with Apple's attempts while nothing reaches receiptq, exit 0 once the TEST notification is stored")
    func testNotificationCommand() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        func command(timeout: Int) async throws -> (status: Int32, output: String) {
            let variables = system.commandLineEnvironment()
            let arguments = ["notifications", "test", "--app", system.app.name, "--environment", "sandbox", "--timeout", String(timeout)]
            return try await offload { try runProcess(ReceiptqExecutable.url, arguments, environment: variables) }
        }
        // Apple (the mock) has no URL for the app yet: it sends nothing, and the command says so.
        let unheard = try await command(timeout: 2)
        #expect(unheard.status == 1, "\(unheard.output)")
        #expect(unheard.output.contains("Asked Apple (sandbox) for a TEST notification.") && !unheard.output.contains("Arrived"))
        // With the app's notification URL registered at Apple, the TEST notification is stored.
        _ = try subscribe(system)
        let heard = try await command(timeout: 30)
        #expect(heard.status == 0, "\(heard.output)")
        #expect(heard.output.contains("Arrived: notification"), "\(heard.output)")
        // Through the support desk: each request is an audit line, and the shared limiter counted it.
        let pg = try system.postgres()
        defer { pg.close() }
        let lines = try await pg.query(
            "SELECT count(*) AS n FROM audit_log WHERE app_id = \(system.app.id) AND action = 'support.test_notification' AND source = 'cli'"
        ).rows.first?.int("n")
        #expect(lines == 2)
    }

    @Test("A refund of a non-consumable sent three times: the entitlement API stops listing it, one audit row, the ledger has the reason")
    func refundOfANonConsumable() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        _ = try subscribe(system)
        let id = try await purchase(system, user: "refund-user")
        let before = try await entitlements(system, user: "refund-user")
        #expect(before?["purchases"]?.arrayValue?.map { $0["transaction_id"]?.stringValue } == [id])

        try system.mock.state.notifications.event(
            type: "REFUND", transactionID: id, environment: .sandbox, delivery: .init(copies: 3))
        #expect(
            try await eventually {
                try await entitlements(system, user: "refund-user")?["purchases"]?.arrayValue?.isEmpty == true
            })
        // Every copy answered 200 (Apple stops retrying), and still one row, applied once.
        #expect(try await eventually { system.mock.state.notifications.posts == 3 })
        // Every copy's job settled: nothing left that could store a second row.
        #expect(try await eventually { try system.queuesIdle([.notification]) })
        let rows = try auditRows(system)
        #expect(rows.count == 1)
        #expect(rows.first?.string("notification_type") == "REFUND")
        #expect(rows.first?.string("outcome") == "applied")
        // The operators' copy has the nested transaction decoded.
        #expect(
            rows.first?.string("payload")?.contains("\"revocationReason\": 1") == true
                || rows.first?.string("payload")?.contains("\"revocationReason\":1") == true)
        let connection = try system.postgres()
        defer { connection.close() }
        let ledger = try #require(
            try await connection.query(
                "SELECT cancellation_date, cancellation_reason, user_identifier FROM in_app_purchases WHERE transaction_id = \(id)"
            ).rows.first)
        #expect(ledger.date("cancellation_date") != nil)
        #expect(ledger.int("cancellation_reason") == 1)
        #expect(ledger.string("user_identifier") == "refund-user")
        // Operators see it: the overview counts it, the list shows it, the detail decodes it.
        let browser = DashboardPagesTests.Browser(system)
        _ = try await browser.logIn()
        let overview = try await browser.get("/admin")
        #expect(overview.text.contains("notification-counts") && overview.text.contains("?type=REFUND"))
        let list = try await browser.get("/admin/notifications?app_id=\(system.app.id.uuidString.lowercased())&type=REFUND")
        #expect(list.status == 200)
        let rowID = try #require(list.text.range(of: #"id="row-"#).map { String(list.text[$0.upperBound...].prefix(36)) })
        let detail = try await browser.get("/admin/notifications/\(rowID)")
        #expect(detail.status == 200)
        #expect(detail.text.contains("revocationReason") && detail.text.contains(id))
        #expect(try await browser.get("/admin/notifications?type=not%20a%20type").status == 422)
        #expect(try await browser.get("/admin/notifications/\(UUID().uuidString)").status == 404)
        // The purchase stays filed under the receipt it came with: no new receipt row.
        #expect(try await connection.query("SELECT count(*) AS n FROM receipts WHERE app_id = \(system.app.id)").rows.first?.int("n") == 1)
    }

    @Test("A subscription's life told by notifications: renewal, grace period, expiry, refund, each state in the entitlement API")
    func subscriptionLifecycle() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        _ = try subscribe(system)
        let original = try await purchase(system, user: "life-user", product: "com.example.monthly", days: 30)
        let center = system.mock.state.notifications

        func subscription() async throws -> JSONValue? {
            try await entitlements(system, user: "life-user")?["subscriptions"]?.arrayValue?.first
        }
        func expectState(_ status: String, notifications count: Int) async throws {
            let reached = try await eventually {
                try await subscription()?["status"]?.stringValue == status && auditRows(system).count == count
            }
            let seen = try await subscription()?["status"]?.stringValue ?? "none"
            #expect(reached, "expected \(status) after \(count) notifications, got \(seen)")
        }

        try center.event(type: "DID_RENEW", transactionID: original, environment: .sandbox)
        try await expectState("active", notifications: 1)
        let renewed = try await subscription()
        #expect(renewed?["latest_transaction_id"]?.stringValue != original)
        #expect(renewed?["original_transaction_id"]?.stringValue == original)

        try center.event(type: "DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD", transactionID: original, environment: .sandbox)
        try await expectState("grace", notifications: 2)
        let inGrace = try await subscription()
        #expect(inGrace?["is_entitled"]?.boolValue == true)

        try center.event(type: "EXPIRED", subtype: "VOLUNTARY", transactionID: original, environment: .sandbox)
        try await expectState("expired", notifications: 3)
        let expired = try await subscription()
        #expect(expired?["is_entitled"]?.boolValue == false)
        #expect(expired?["auto_renew_status"]?.boolValue == false)

        try center.event(type: "REFUND", transactionID: original, environment: .sandbox)
        try await expectState("revoked", notifications: 4)
        let types = try auditRows(system).map { $0.string("notification_type") ?? "" }
        #expect(types == ["DID_RENEW", "DID_FAIL_TO_RENEW", "EXPIRED", "REFUND"])
        // The renewal the notification brought is in the ledger, for the same user.
        let connection = try system.postgres()
        defer { connection.close() }
        let users = try await connection.query(
            "SELECT DISTINCT user_identifier FROM in_app_purchases WHERE app_id = \(system.app.id) AND original_transaction_id = \(original)"
        ).rows.map { $0.string("user_identifier") }
        #expect(users == ["life-user"])
    }

    @Test("Delivered newest first: the older notification is recorded as stale and the state stays the newest one")
    func outOfOrder() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        _ = try subscribe(system)
        let original = try await purchase(system, user: "order-user", product: "com.example.monthly", days: 30)
        let center = system.mock.state.notifications
        try center.event(type: "DID_RENEW", transactionID: original, environment: .sandbox, delivery: .init(hold: true))
        // The newer one must be signed in a later millisecond: the mock signs with the clock, in
        // rounded milliseconds, so two past the one this call ended in.
        let heldSignedBy = Int64(Date().timeIntervalSince1970 * 1000) + 1
        #expect(try await eventually(interval: .milliseconds(1)) { Int64(Date().timeIntervalSince1970 * 1000) > heldSignedBy })
        // The newer one arrives and is stored first; only then the older one. (Released together,
        // two committers may still apply them in signed order, each then rightly `applied`.)
        try center.event(type: "EXPIRED", subtype: "VOLUNTARY", transactionID: original, environment: .sandbox)
        #expect(try await eventually { try auditRows(system).count == 1 })
        #expect(center.release(order: "held") == 1)
        #expect(try await eventually { try auditRows(system).count == 2 })
        let outcomes = Dictionary(
            uniqueKeysWithValues: try auditRows(system).map { ($0.string("notification_type") ?? "", $0.string("outcome") ?? "") })
        #expect(outcomes == ["EXPIRED": "applied", "DID_RENEW": "stale"])
        let subscription = try await entitlements(system, user: "order-user")?["subscriptions"]?.arrayValue?.first
        #expect(subscription?["status"]?.stringValue == "expired")
    }

    @Test("Forged, foreign, unknown or malformed notifications are refused with their reason; nothing is queued")
    func refusals() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let path = try subscribe(system)
        let id = try await purchase(system, user: "refusal-user")
        let authority = try TestSystem.sharedJWSAuthority.get()
        let now = (Date().timeIntervalSince1970 * 1000).rounded()
        func notification(bundleID: String, environment: String = "Sandbox") throws -> String {
            try authority.sign(
                .object([
                    "notificationType": .string("TEST"), "notificationUUID": .string(UUID().uuidString), "signedDate": .number(now),
                    "data": .object(["bundleId": .string(bundleID), "environment": .string(environment)]),
                ]))
        }
        func post(_ body: JSONValue, to target: String = path) async throws -> (Int, JSONValue?) {
            let response = try await system.client.send(
                .init(
                    method: "POST", url: "http://127.0.0.1:\(system.apiPort)\(target)", headers: [("Content-Type", "application/json")],
                    body: Array(body.encodedText.utf8)))
            return (response.status, try? JSONDecoder().decode(JSONValue.self, from: Data(response.body)))
        }
        // Accepted: Apple's TEST notification, recorded.
        let good = try notification(bundleID: system.app.bundleID)
        let (accepted, answer) = try await post(.object(["signedPayload": .string(good)]))
        #expect(accepted == 200)
        #expect(answer?["duplicate"]?.boolValue == false)
        #expect(try await post(.object(["signedPayload": .string(good)])).1?["duplicate"]?.boolValue == true)
        // Another app's, a tampered one, one from an untrusted chain, a Server API transaction.
        let foreign = try await post(.object(["signedPayload": .string(try notification(bundleID: "com.example.other"))]))
        #expect(foreign.0 == 402 && foreign.1?["reason"]?.stringValue == "bundle_id_mismatch")
        let parts = good.split(separator: ".")
        let tampered = try await post(.object(["signedPayload": .string("\(parts[0]).\(parts[1])x.\(parts[2])")]))
        #expect(tampered.0 == 402 || tampered.0 == 422)
        let stranger = try MockAppleJWSAuthority.generate()
        let untrusted = try stranger.sign(
            .object([
                "notificationType": .string("TEST"), "notificationUUID": .string(UUID().uuidString), "signedDate": .number(now),
                "data": .object(["bundleId": .string(system.app.bundleID), "environment": .string("Sandbox")]),
            ]))
        let refusedChain = try await post(.object(["signedPayload": .string(untrusted)]))
        #expect(refusedChain.0 == 402 && refusedChain.1?["reason"]?.stringValue == "untrusted_chain")
        // Unknown app or token: 404 without telling which.
        #expect(
            try await post(.object(["signedPayload": .string(good)]), to: "/apple/notifications/\(system.app.name)/0123456789abcdef0123").0 == 404)
        #expect(try await post(.object(["signedPayload": .string(good)]), to: "/apple/notifications/nobody/0123456789abcdef0123").0 == 404)
        // Not a notification: 422 naming the field.
        let (invalid, errors) = try await post(.object(["hello": .string("world")]))
        #expect(invalid == 422)
        #expect(errors?["errors"]?.arrayValue?.first?["field"]?.stringValue == "signedPayload")
        // V1 with another password: 401.
        let v1 = JSONValue.object([
            "notification_type": .string("CANCEL"), "password": .string("not-the-secret"), "bid": .string(system.app.bundleID),
        ])
        #expect(try await post(v1).0 == 401)
        _ = id
        #expect(try await eventually { try auditRows(system).count == 1 })
        #expect(try auditRows(system).first?.string("outcome") == "recorded")
    }

    @Test("V1: the password checked and never stored, the unified receipt applied like a verifyReceipt answer")
    func versionOne() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        _ = try subscribe(system, version: "v1")
        let original = try await purchase(system, user: "v1-user", product: "com.example.monthly", days: 30)
        try system.mock.state.notifications.event(type: "DID_RENEW", transactionID: original, environment: .sandbox, delivery: .init(copies: 2))
        #expect(try await eventually { try auditRows(system).count == 1 })
        // Both copies answered and every job settled: nothing left that could store a second row.
        #expect(try await eventually { try system.mock.state.notifications.posts == 2 && system.queuesIdle([.notification]) })
        let rows = try auditRows(system)
        #expect(rows.count == 1)
        #expect(rows.first?.string("notification_type") == "DID_RENEW")
        #expect(rows.first?.string("payload")?.contains("integration-secret") == false)
        let subscription = try await entitlements(system, user: "v1-user")?["subscriptions"]?.arrayValue?.first
        #expect(subscription?["latest_transaction_id"]?.stringValue != original)
        #expect(subscription?["status"]?.stringValue == "active")
        let connection = try system.postgres()
        defer { connection.close() }
        #expect(
            try await connection.query("SELECT count(*) AS n FROM in_app_purchases WHERE original_transaction_id = \(original)").rows.first?.int("n")
                == 2)
    }

    @Test("The endpoint down while Apple sent five notifications: the history sweep recovers each once, and a second sweep adds nothing")
    func historyRecovery() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        _ = try subscribe(system)
        let subscription = try await purchase(system, user: "history-user", product: "com.example.monthly", days: 30)
        let lifetime = try await purchase(system, user: "history-user")
        // Apple cannot reach receiptq (and gives up at once here): nothing arrives.
        system.mock.state.notifications.setTarget(
            .init(url: "http://127.0.0.1:\(try freeLoopbackPort())/down", retries: 0), bundleID: system.app.bundleID)
        let center = system.mock.state.notifications
        try center.event(type: "DID_RENEW", transactionID: subscription, environment: .sandbox)
        try center.event(type: "DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD", transactionID: subscription, environment: .sandbox)
        try center.event(type: "EXPIRED", subtype: "BILLING_RETRY", transactionID: subscription, environment: .sandbox)
        try center.event(type: "REFUND", transactionID: lifetime, environment: .sandbox)
        try center.notify(type: "TEST", transaction: nil, bundleID: system.app.bundleID, environment: .sandbox)
        #expect(try await eventually { center.sent.allSatisfy { !$0.attempts.isEmpty } })
        #expect(center.sent.allSatisfy { !$0.delivered })
        #expect(try auditRows(system).isEmpty)

        // An app whose URL is two days old and that heard nothing: silent (the alert's gauge).
        let silentCheck = try system.postgres()
        defer { silentCheck.close() }
        _ = try await silentCheck.query(
            "UPDATE apps SET notification_token_issued_at = now() - interval '2 days' WHERE id = \(system.app.id)")
        let cursors = PostgresNotificationHistoryCursors(
            pool: PostgresConnectionPool(configuration: system.configuration.postgres, size: 1), secrets: nil, onlyApps: [system.app.id])
        #expect(try await cursors.silentApps(since: Date().addingTimeInterval(-86_400)) == 1)
        var logger = Logger(label: "history-test")
        logger.logLevel = .warning
        let history = try #require(
            try ReceiptQueueApp.makeNotificationSweep(system.configuration, onlyApps: [system.app.id], logger: logger))
        defer { history.shutdown() }
        let report = await history.sweep.sweep()
        #expect(report.accepted == 5)
        #expect(report.interrupted == 0)
        #expect(try await eventually { try auditRows(system).count == 5 })
        let types = Set(try auditRows(system).map { $0.string("notification_type") ?? "" })
        #expect(types == ["DID_RENEW", "DID_FAIL_TO_RENEW", "EXPIRED", "REFUND", "TEST"])
        let entitlements = try await entitlements(system, user: "history-user")
        #expect(entitlements?["subscriptions"]?.arrayValue?.first?["status"]?.stringValue == "expired")
        #expect(entitlements?["purchases"]?.arrayValue?.isEmpty == true)
        // The Server API was asked with the app's key, through its rate bucket; the cursor moved on.
        #expect(system.mock.state.serverAPI.calls("sandbox notification_history") >= 1)
        let connection = try system.postgres()
        defer { connection.close() }
        let cursor = try #require(
            try await connection.query(
                "SELECT window_end, pagination_token FROM notification_history_cursors WHERE app_id = \(system.app.id) AND environment = 'sandbox'"
            ).rows.first)
        #expect(cursor.string("pagination_token") == nil)
        #expect(try await cursors.silentApps(since: Date().addingTimeInterval(-86_400)) == 0)
        // Again (the windows overlap): every notification is known, nothing new is stored.
        let again = await history.sweep.sweep()
        #expect(again.accepted == 5)
        // What the second sweep queued is settled: nothing left that could store another row.
        #expect(try await eventually { try system.queuesIdle([.notification]) })
        #expect(try auditRows(system).count == 5)
    }

    @Test("Redis down: the endpoint answers 503 (so Apple retries), nothing is stored; once Redis is back Apple's retry is applied once")
    func redisDown() async throws {
        let redis = try ThrowawayRedis()
        defer { redis.destroy() }
        let system = try await TestSystem.start(environment: ["REDIS_PORT": String(redis.port), "REDIS_CONNECT_TIMEOUT_MS": "300"])
        defer { Task { await system.stop() } }
        let path = try subscribe(system, retries: 0)
        let id = try await purchase(system, user: "outage-user")
        try redis.shutdown()
        system.mock.state.notifications.setTarget(
            .init(
                url: "http://127.0.0.1:\(system.apiPort)\(path)", password: system.app.sharedSecret, retries: 20, retryDelaySeconds: 0.25),
            bundleID: system.app.bundleID)
        try system.mock.state.notifications.event(type: "REFUND", transactionID: id, environment: .sandbox)
        // Apple is told 503 while Redis is down: every attempt so far failed, none was a 4xx.
        #expect(try await eventually { (system.mock.state.notifications.sent.first?.attempts.count ?? 0) >= 2 })
        let failed = system.mock.state.notifications.sent.first?.attempts ?? []
        #expect(failed.allSatisfy { $0.result == "UNSUCCESSFUL_HTTP_RESPONSE_CODE" })
        #expect(try auditRows(system).isEmpty)
        let test = try TestSystem.sharedJWSAuthority.get().sign(
            .object([
                "notificationType": .string("TEST"), "notificationUUID": .string(UUID().uuidString),
                "signedDate": .number((Date().timeIntervalSince1970 * 1000).rounded()),
                "data": .object(["bundleId": .string(system.app.bundleID), "environment": .string("Sandbox")]),
            ]))
        let direct = try await system.client.send(
            .init(
                method: "POST", url: "http://127.0.0.1:\(system.apiPort)\(path)", headers: [("Content-Type", "application/json")],
                body: Array(JSONValue.object(["signedPayload": .string(test)]).encodedText.utf8)))
        #expect(direct.status == 503)
        #expect(direct.header("Retry-After") != nil)
        try redis.start()
        #expect(try await eventually(timeout: .seconds(30)) { system.mock.state.notifications.sent.first?.delivered == true })
        #expect(try await eventually { try auditRows(system).count == 1 })
        #expect(try await entitlements(system, user: "outage-user")?["purchases"]?.arrayValue?.isEmpty == true)
    }
}
