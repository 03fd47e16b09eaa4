import AppStoreClient
import Curl
import Foundation
import Libpq
import MockAppStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Testing

/// The support endpoints through a running system against the mock App Store: the admin API,
/// the customer view's forms and `receiptq support`, each call audited and rate-limited, Apple's
/// answers stored through the one queue and engine.
@Suite(
    "Support endpoints: order look-up, refunds, extensions, account tokens, test notifications", .blockingWork,
    .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct SupportTests {
    func send(_ system: TestSystem, _ method: String, _ path: String, _ body: JSONValue? = nil) async throws -> AdminAPITests.Answer {
        try await AdminAPITests().send(system, method, path, body: body?.encodedText ?? "")
    }

    func base(_ system: TestSystem) -> String { "/admin/api/apps/\(system.app.id.uuidString.lowercased())" }

    /// A purchase Apple (the mock) knows in production and receiptq has never seen.
    func unseenPurchase(_ system: TestSystem, product: String = "com.example.lifetime", days: Double? = nil) throws -> String {
        let (_, payload) = try system.signedTransaction(product: product, days: days, environment: "Production")
        return try #require(payload["transactionId"]?.stringValue)
    }

    func purchases(_ system: TestSystem, user: String) async throws -> [String] {
        let answer = try await system.get(path: "/client/subscriptions?user_identifier=\(user)").1
        return answer?["purchases"]?.arrayValue?.compactMap { $0["transaction_id"]?.stringValue } ?? []
    }

    /// The newest audit lines of `action` on this system's app (the database and its audit log are
    /// shared with the suites running beside this one, the contract run's support calls included).
    func audit(_ system: TestSystem, _ action: String) async throws -> [JSONValue] {
        let entries = try await send(system, "GET", "/admin/api/audit?action=\(action)&limit=500").json?["entries"]?.arrayValue ?? []
        return entries.filter { $0["app_id"]?.stringValue == system.app.id.uuidString.lowercased() }
    }

    @Test("Look Up Order ID: the purchase validated and stored for the named user, audited; an unknown order 404 with its reason")
    func orderLookup() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let id = try unseenPurchase(system)
        let user = "order-\(UUID().uuidString.prefix(6))"
        let found = try await send(
            system, "POST", "\(base(system))/orders/lookup", .object(["order_id": .string(id), "user_identifier": .string(user)]))
        #expect(found.status == 200, "\(String(decoding: found.body, as: UTF8.self))")
        #expect(found.json?["transactions"]?.arrayValue?.map { $0["transaction_id"]?.stringValue } == [id])
        #expect(found.json?["queued"]?.intValue == 1)
        #expect(try await eventually { try await purchases(system, user: user) == [id] })
        let line = try #require(try await audit(system, "support.order_lookup").first)
        #expect(line["outcome"]?.stringValue == "done" && line["job_count"]?.intValue == 1)
        #expect(line["user_identifiers"]?.arrayValue?.first?.stringValue == user)
        #expect(line["app_id"]?.stringValue == system.app.id.uuidString.lowercased())

        let unknown = try await send(system, "POST", "\(base(system))/orders/lookup", .object(["order_id": .string("NOSUCHORDER")]))
        #expect(unknown.status == 404)
        #expect(unknown.json?["error"]?.stringValue == "order_not_found")
        #expect(unknown.json?["reason"]?.stringValue?.contains("order") == true)
        let wrong = try await send(system, "POST", "\(base(system))/orders/lookup", .object(["orderId": .string(id)]))
        #expect(wrong.status == 422)
        #expect(wrong.json?["errors"]?.arrayValue?.first?["field"]?.stringValue == "orderId")

        // Viewers look (the stored mass extensions), operators act: a viewer's look-up is refused
        // before Apple is asked, and the attempt is audited.
        let viewer = "support-viewer-\(UUID().uuidString.prefix(6).lowercased())"
        let admin = try ReceiptQueueApp.Admin(system.configuration, label: "support-tests")
        defer { admin.close() }
        try admin.addOperator(
            username: viewer, role: .viewer, passwordHash: try admin.operatorPasswordHash(OperatorTests.password), audit: .test("operator.add"))
        let asked = system.mock.state.serverAPI.calls("production lookup")
        let refused = try await OperatorTests().send(
            system, "POST", "\(base(system))/orders/lookup", user: viewer, body: #"{"order_id": "\#(id)"}"#)
        #expect(refused.status == 403)
        #expect(system.mock.state.serverAPI.calls("production lookup") == asked)
        #expect(try await OperatorTests().send(system, "GET", "\(base(system))/mass-extensions", user: viewer).status == 200)
        let denied = try await send(system, "GET", "/admin/api/audit?action=access.denied&actor=\(viewer)").json?["entries"]?.arrayValue
        #expect(denied?.isEmpty == false)
    }

    @Test("Refund history: a refund receiptq did not know is applied (the purchase leaves the entitlements), a known one is not queued again")
    func refunds() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let id = try unseenPurchase(system)
        let user = "refund-\(UUID().uuidString.prefix(6))"
        _ = try await send(system, "POST", "\(base(system))/orders/lookup", .object(["order_id": .string(id), "user_identifier": .string(user)]))
        #expect(try await eventually { try await purchases(system, user: user) == [id] })
        // Apple refunds it; no notification reaches receiptq.
        system.mock.state.serverAPI.update(transaction: id, in: .production) {
            $0["revocationDate"] = .number((Date().timeIntervalSince1970 * 1000).rounded())
            $0["revocationReason"] = .number(1)
        }
        let first = try await send(system, "POST", "\(base(system))/refunds/lookup", .object(["transaction_id": .string(id)]))
        #expect(first.status == 200, "\(String(decoding: first.body, as: UTF8.self))")
        #expect(first.json?["refunded"]?.arrayValue?.first?["revocation_date"] != .null)
        #expect(first.json?["applied"]?.intValue == 1)
        #expect(try await eventually { try await purchases(system, user: user).isEmpty })
        let second = try await send(system, "POST", "\(base(system))/refunds/lookup", .object(["transaction_id": .string(id)]))
        #expect(second.json?["applied"]?.intValue == 0)
        let bad = try await send(system, "POST", "\(base(system))/refunds/lookup", .object(["transaction_id": .string("12ab")]))
        #expect(bad.status == 422 && bad.json?["errors"]?.arrayValue?.first?["field"]?.stringValue == "transaction_id")
    }

    @Test(
        "Extensions: 91 days is a 422 naming the field (no call); one subscription extended; a mass extension stored and shown until complete; Apple's 429 a 429"
    )
    func extensions() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let original = try unseenPurchase(system, product: "com.example.monthly", days: 10)
        let tooLong = try await send(
            system, "POST", "\(base(system))/subscriptions/extend",
            .object(["original_transaction_id": .string(original), "extend_by_days": .number(91), "extend_reason_code": .number(1)]))
        #expect(tooLong.status == 422)
        #expect(tooLong.json?["errors"]?.arrayValue?.first?["field"]?.stringValue == "extend_by_days")
        let text = try await send(
            system, "POST", "\(base(system))/subscriptions/extend",
            .object(["original_transaction_id": .string(original), "extend_by_days": .string("30"), "extend_reason_code": .number(1)]))
        #expect(text.status == 422 && text.json?["errors"]?.arrayValue?.first?["field"]?.stringValue == "extend_by_days")
        #expect(system.mock.state.serverAPI.calls("production extend") == 0)

        let extended = try await send(
            system, "POST", "\(base(system))/subscriptions/extend",
            .object(["original_transaction_id": .string(original), "extend_by_days": .number(30), "extend_reason_code": .number(1)]))
        #expect(extended.status == 200, "\(String(decoding: extended.body, as: UTF8.self))")
        #expect(extended.json?["success"]?.boolValue == true)
        // Not stored by receiptq yet: nothing to read again.
        #expect(extended.json?["refresh_queued"]?.boolValue == false)
        #expect(try await audit(system, "support.extend").first?["outcome"]?.stringValue == "done")

        // Once receiptq stores the subscription, an extension reads it again: the stored renewal
        // date becomes Apple's new one without a notification or a re-poll.
        let user = "extend-\(UUID().uuidString.prefix(6))"
        _ = try await send(
            system, "POST", "\(base(system))/orders/lookup", .object(["order_id": .string(original), "user_identifier": .string(user)]))
        func storedExpiry() async throws -> Date? {
            let answer = try await system.get(path: "/client/subscriptions/\(original)?environment=production").1
            return answer?["expires_date"]?["ms"]?.stringValue.flatMap(Double.init).map { Date(timeIntervalSince1970: $0 / 1000) }
        }
        #expect(try await eventually { try await storedExpiry() != nil })
        let again = try await send(
            system, "POST", "\(base(system))/subscriptions/extend",
            .object(["original_transaction_id": .string(original), "extend_by_days": .number(10), "extend_reason_code": .number(1)]))
        #expect(again.json?["refresh_queued"]?.boolValue == true, "\(String(decoding: again.body, as: UTF8.self))")
        let renewsMs = try #require(again.json?["effective_date"]?["ms"]?.stringValue.flatMap(Double.init))
        let renews = Date(timeIntervalSince1970: renewsMs / 1000)
        #expect(try await eventually { try await storedExpiry().map { abs($0.timeIntervalSince(renews)) < 2 } ?? false })

        let mass = try await send(
            system, "POST", "\(base(system))/mass-extensions",
            .object(["product_id": .string("com.example.monthly"), "extend_by_days": .number(5), "extend_reason_code": .number(3)]))
        #expect(mass.status == 202, "\(String(decoding: mass.body, as: UTF8.self))")
        let request = try #require(mass.json?["request_identifier"]?.stringValue)
        #expect(mass.json?["complete"]?.boolValue == false && mass.json?["requested_by"]?.stringValue == "admin")
        let listed = try await send(system, "GET", "\(base(system))/mass-extensions")
        #expect(listed.json?["mass_extensions"]?.arrayValue?.map { $0["request_identifier"]?.stringValue } == [request])
        // The mock finishes it at the second status request: until then it is shown as in progress.
        let progress = try await send(system, "GET", "\(base(system))/mass-extensions/\(request)")
        #expect(progress.json?["complete"]?.boolValue == false && progress.json?["checked_at"] != .null)
        let done = try await send(system, "GET", "\(base(system))/mass-extensions/\(request)")
        #expect(done.json?["complete"]?.boolValue == true && done.json?["succeeded_count"]?.intValue == 0)
        // Complete: shown from the store, Apple is not asked again.
        let asked = system.mock.state.serverAPI.calls("production mass_extend_status")
        _ = try await send(system, "GET", "\(base(system))/mass-extensions/\(request)")
        #expect(system.mock.state.serverAPI.calls("production mass_extend_status") == asked)
        let unknown = try await send(system, "GET", "\(base(system))/mass-extensions/\(UUID().uuidString)")
        #expect(unknown.status == 404)

        let retryAt = Int64((Date().timeIntervalSince1970 + 20) * 1000)
        system.mock.state.serverAPI.addRule(.init(pathPrefix: "/inApps/v1/transactions/", httpStatus: 429, retryAfterMs: retryAt))
        let limited = try await send(
            system, "POST", "\(base(system))/app-account-token",
            .object(["original_transaction_id": .string(original), "app_account_token": .string(UUID().uuidString)]))
        #expect(limited.status == 429)
        #expect(limited.json?["error"]?.stringValue == "rate_limited")
        #expect((limited.header("Retry-After").flatMap(Int.init) ?? 0) > 10)
    }

    @Test(
        "The customer view: an operator asks for a test notification and its status with the forms; receiptq support and notifications status on the command line"
    )
    func dashboardAndCommandLine() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let browser = DashboardPagesTests.Browser(system)
        _ = try await browser.logIn()
        let view = try await browser.get("/admin/customers?app_id=\(system.app.id.uuidString.lowercased())")
        #expect(view.status == 200 && view.text.contains(#"id="support-test-notification""#))
        let csrf = try #require(view.csrf)
        let app = system.app.id.uuidString.lowercased()
        let asked = try await browser.post(
            "/admin/customers/support/test-notification", [("csrf", csrf), ("app_id", app), ("environment", "production")])
        #expect(asked.status == 200, "\(asked.text)")
        let token = try #require(asked.text.range(of: #"name="token" value=""#).map { String(asked.text[$0.upperBound...].prefix { $0 != "\"" }) })
        let status = try await browser.post(
            "/admin/customers/support/test-notification-status", [("csrf", csrf), ("app_id", app), ("environment", "production"), ("token", token)])
        #expect(status.status == 200 && status.text.contains("Apple has not tried to send it yet."), "\(status.text)")
        // Without the form's token nothing is sent to Apple.
        let forged = try await browser.post("/admin/customers/support/test-notification", [("app_id", app), ("environment", "production")])
        #expect(forged.status == 403)
        let bad = try await browser.post(
            "/admin/customers/support/extend",
            [("csrf", csrf), ("app_id", app), ("original_transaction_id", "1"), ("extend_by_days", "91"), ("extend_reason_code", "1")])
        #expect(bad.status == 422 && bad.text.contains("extend_by_days"))
        #expect(try await audit(system, "support.test_notification").first?["source"]?.stringValue == "dashboard")

        // The command line: its own desk, its own audit line.
        let variables = system.commandLineEnvironment()
        func receiptq(_ arguments: [String]) async throws -> (status: Int32, output: String) {
            try await offload { try runProcess(ReceiptqExecutable.url, arguments, environment: variables) }
        }
        let printed = try await receiptq(["notifications", "status", "--app", system.app.name, "--token", token])
        #expect(printed.status == 0 && printed.output.contains("Notification \(token)"), "\(printed.output)")
        let original = try unseenPurchase(system, product: "com.example.monthly", days: 10)
        let tooLong = try await receiptq(["support", "extend", "--app", system.app.name, "--original-transaction-id", original, "--days", "91"])
        #expect(tooLong.status != 0 && tooLong.output.contains("extend-by-days"), "\(tooLong.output)")
        let extended = try await receiptq(["support", "extend", "--app", system.app.name, "--original-transaction-id", original, "--days", "7"])
        #expect(extended.status == 0 && extended.output.contains("Extended \(original) by 7 days"), "\(extended.output)")
        let line = try #require(try await audit(system, "support.extend").first)
        #expect(line["actor"]?.stringValue?.hasPrefix("cli:") == true && line["outcome"]?.stringValue == "done")
    }
}

extension SupportTests {
    @Test("What the support endpoints answer (200, 202, 401, 404, 415, 422, 429) is what openapi.yaml says, field by field")
    func answersMatchTheDocument() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let recorder = ExchangeRecorder(system: system)
        let admin = [(name: "Authorization", value: AdminAPITests.basic)]
        let json = admin + [(name: "Content-Type", value: "application/json")]
        let base = base(system)
        try await recorder.send("GET", "/openapi.yaml")
        let original = try unseenPurchase(system, product: "com.example.monthly", days: 10)
        try await recorder.send("POST", "\(base)/orders/lookup", headers: json, body: #"{"order_id":"\#(original)","user_identifier":"c-1"}"#)
        try await recorder.send("POST", "\(base)/orders/lookup", headers: json, body: #"{"order_id":"NOSUCH1"}"#)
        try await recorder.send("POST", "\(base)/orders/lookup", headers: admin + [(name: "Content-Type", value: "text/plain")], body: "{}")
        try await recorder.send("POST", "\(base)/orders/lookup", body: "{}")
        try await recorder.send("POST", "\(base)/refunds/lookup", headers: json, body: #"{"transaction_id":"\#(original)"}"#)
        try await recorder.send(
            "POST", "\(base)/subscriptions/extend", headers: json,
            body: #"{"original_transaction_id":"\#(original)","extend_by_days":3,"extend_reason_code":0}"#)
        try await recorder.send(
            "POST", "\(base)/subscriptions/extend", headers: json,
            body: #"{"original_transaction_id":"\#(original)","extend_by_days":91,"extend_reason_code":0}"#)
        let mass = try await recorder.send(
            "POST", "\(base)/mass-extensions", headers: json, body: #"{"product_id":"com.example.monthly","extend_by_days":3,"extend_reason_code":2}"#
        )
        let request = try #require(try? JSONDecoder().decode(JSONValue.self, from: Data(mass.body.utf8))["request_identifier"]?.stringValue)
        try await recorder.send("GET", "\(base)/mass-extensions", headers: admin)
        try await recorder.send("GET", "\(base)/mass-extensions/\(request)", headers: admin)
        try await recorder.send("GET", "\(base)/mass-extensions/\(request)", headers: admin)
        try await recorder.send(
            "POST", "\(base)/app-account-token", headers: json,
            body: #"{"original_transaction_id":"\#(original)","app_account_token":"\#(UUID().uuidString)"}"#)
        let test = try await recorder.send("POST", "\(base)/test-notifications", headers: json, body: "{}")
        let token = try #require(try? JSONDecoder().decode(JSONValue.self, from: Data(test.body.utf8))["test_notification_token"]?.stringValue)
        try await recorder.send("GET", "\(base)/test-notifications/\(token)?environment=production", headers: admin)
        try await recorder.send("GET", "\(base)/test-notifications/nosuchtoken", headers: admin)
        // No such app: 404; Apple's limit: 429 with Retry-After.
        try await recorder.send("POST", "/admin/api/apps/\(UUID().uuidString.lowercased())/test-notifications", headers: json, body: "{}")
        system.mock.state.serverAPI.addRule(
            .init(pathPrefix: "/inApps/v1/transactions/", httpStatus: 429, retryAfterMs: Int64((Date().timeIntervalSince1970 + 20) * 1000)))
        try await recorder.send(
            "POST", "\(base)/app-account-token", headers: json,
            body: #"{"original_transaction_id":"\#(original)","app_account_token":"\#(UUID().uuidString)"}"#)

        let exchanges = await recorder.exchanges
        #expect(Set(exchanges.map(\.status)).isSuperset(of: [200, 202, 401, 404, 415, 422, 429]))
        let served = try #require(exchanges.first { $0.path == "/openapi.yaml" })
        let report = try OpenAPIChecker.check(spec: Array(served.body.utf8), exchanges: exchanges)
        #expect(report.checked == exchanges.count)
        #expect(report.failures == [], "answers that contradict openapi.yaml")
    }
}
