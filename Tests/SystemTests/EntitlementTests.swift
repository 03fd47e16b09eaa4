import Foundation
import Libpq
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// Named entitlements as a backend and its operators use them: a catalogue mapping products to
/// what the app unlocks, `GET /client/customers/{user}` answering by name, and operators' grants
/// with their events and audit lines.
@Suite("Named entitlements: the catalogue, the customer API, grants", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct EntitlementTests {
    let admin = AdminAPITests()

    func customer(_ system: TestSystem, _ user: String) async throws -> JSONValue {
        let (status, body) = try await system.get(path: "/client/customers/\(user)")
        #expect(status == 200)
        return try #require(body)
    }

    @Test(
        "A subscription's product names its entitlement; a grant entitles a user who bought nothing until it is revoked, each with one event and an audit line"
    )
    func catalogueAndGrants() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let app = system.app.id.canonical
        let pro = #"{"products": ["com.example.yearly", "com.example.lifetime"], "description": "Everything"}"#
        let defined = try await admin.send(system, "PUT", "/admin/api/apps/\(app)/entitlements/pro", body: pro)
        #expect(defined.status == 200, "\(String(decoding: defined.body, as: UTF8.self))")
        #expect(
            try await admin.send(system, "PUT", "/admin/api/apps/\(app)/entitlements/no_ads", body: #"{"products": ["com.example.noads"]}"#).status
                == 200)
        let catalogue = try await admin.send(system, "GET", "/admin/api/apps/\(app)/entitlements").json
        #expect(catalogue?["entitlements"]?.arrayValue?.compactMap { $0["entitlement"]?.stringValue } == ["no_ads", "pro"])

        // A subscriber of com.example.yearly is `pro` until the subscription's expiry.
        let transaction = try system.signedTransaction()
        let body = #"{"signed_transaction":"\#(transaction.jws)","user_identifier":"ent-subscriber"}"#
        #expect([200, 206].contains(try await system.post(body, path: "/client/transactions").0))
        let entitled = try await eventually(timeout: .seconds(30)) {
            try await customer(system, "ent-subscriber")["entitlements"]?.arrayValue?.first?["id"]?.stringValue == "pro"
        }
        #expect(entitled)
        let subscriber = try await customer(system, "ent-subscriber")
        let held = try #require(subscriber["entitlements"]?.arrayValue)
        #expect(held.count == 1, "no_ads is not held: nothing bought grants it")
        #expect(held[0]["sources"]?.arrayValue?.first?["type"]?.stringValue == "subscription")
        #expect(held[0]["sources"]?.arrayValue?.first?["product_id"]?.stringValue == "com.example.yearly")
        #expect(held[0]["expires_date"]?["ms"]?.intValue == subscriber["subscriptions"]?.arrayValue?.first?["expires_date"]?["ms"]?.intValue)
        #expect(subscriber["subscriptions"]?.arrayValue?.count == 1)

        // A user who bought nothing: nothing, then `no_ads` by a grant, then nothing again.
        #expect(try await customer(system, "ent-guest")["entitlements"]?.arrayValue?.isEmpty == true)
        let until = ISO8601DateFormatter().string(from: Date().addingTimeInterval(30 * 86_400))
        let granted = try await admin.send(
            system, "POST", "/admin/api/customers/\(app)/ent-guest/grants",
            body: #"{"entitlement": "no_ads", "expires_at": "\#(until)", "reason": "support ticket 123"}"#)
        #expect(granted.status == 201, "\(String(decoding: granted.body, as: UTF8.self))")
        let grantID = try #require(granted.json?["id"]?.stringValue)
        let guest = try await customer(system, "ent-guest")
        #expect(guest["entitlements"]?.arrayValue?.map { $0["id"]?.stringValue } == ["no_ads"])
        #expect(guest["entitlements"]?.arrayValue?.first?["sources"]?.arrayValue?.first?["reference"]?.stringValue == grantID)
        #expect(guest["grants"]?.arrayValue?.first?["reason"]?.stringValue == "support ticket 123")
        let revoked = try await admin.send(system, "POST", "/admin/api/customers/\(app)/ent-guest/grants/\(grantID)/revoke")
        #expect(revoked.status == 200 && revoked.json?["is_active"] == .bool(false))
        // Revoked again: answered as it is, no second event.
        #expect(try await admin.send(system, "POST", "/admin/api/customers/\(app)/ent-guest/grants/\(grantID)/revoke").status == 200)
        #expect(try await customer(system, "ent-guest")["entitlements"]?.arrayValue?.isEmpty == true)

        // The events API lists an event once no transaction that began before its commit is still
        // open (so none can appear behind it later): on a busy database that takes a moment.
        let listed = try await eventually(timeout: .seconds(30)) {
            let (_, events) = try await system.get(path: "/client/events?user_identifier=ent-guest&type=entitlement.*")
            return events?["events"]?.arrayValue?.compactMap { $0["type"]?.stringValue } == ["entitlement.granted", "entitlement.revoked"]
        }
        #expect(listed, "one entitlement.granted, then one entitlement.revoked")
        let pg = try system.postgres()
        defer { pg.close() }
        let audit = try await pg.query(
            "SELECT action FROM audit_log WHERE app_id = \(system.app.id) AND action LIKE 'entitlement.%' ORDER BY id"
        ).rows.compactMap { $0.string("action") }
        #expect(audit == ["entitlement.define", "entitlement.define", "entitlement.grant", "entitlement.revoke"])
    }

    @Test("Refusals name the field: an unknown entitlement, no products, a past expiry; unknown grants are 404; a user id with a space is one user")
    func refusals() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let app = system.app.id.canonical
        func field(_ answer: AdminAPITests.Answer) -> String? { answer.json?["errors"]?.arrayValue?.first?["field"]?.stringValue }
        let unknown = try await admin.send(system, "POST", "/admin/api/customers/\(app)/u/grants", body: #"{"entitlement": "gold"}"#)
        #expect(unknown.status == 422 && field(unknown) == "entitlement")
        let empty = try await admin.send(system, "PUT", "/admin/api/apps/\(app)/entitlements/gold", body: #"{"products": []}"#)
        #expect(empty.status == 422 && field(empty) == "products")
        let badID = try await admin.send(system, "PUT", "/admin/api/apps/\(app)/entitlements/Gold", body: #"{"products": ["p"]}"#)
        #expect(badID.status == 422 && field(badID) == "entitlement")
        #expect(try await admin.send(system, "PUT", "/admin/api/apps/\(app)/entitlements/gold", body: #"{"products": ["p"]}"#).status == 200)
        let past = try await admin.send(
            system, "POST", "/admin/api/customers/\(app)/u/grants", body: #"{"entitlement": "gold", "expires_at": "2020-01-01T00:00:00Z"}"#)
        #expect(past.status == 422 && field(past) == "expires_at")
        #expect(try await admin.send(system, "POST", "/admin/api/customers/\(app)/u/grants/\(UUID().canonical)/revoke").status == 404)
        // A user identifier is percent-encoded in the path and means the same user in both APIs.
        let spaced = try await admin.send(system, "POST", "/admin/api/customers/\(app)/a%20b/grants", body: #"{"entitlement": "gold"}"#)
        #expect(spaced.json?["user_identifier"]?.stringValue == "a b")
        let (_, customer) = try await system.get(path: "/client/customers/a%20b")
        #expect(customer?["user_identifier"]?.stringValue == "a b")
        #expect(customer?["entitlements"]?.arrayValue?.first?["id"]?.stringValue == "gold")
        #expect(try await admin.send(system, "DELETE", "/admin/api/apps/\(app)/entitlements/silver").status == 404)
        #expect(try await admin.send(system, "DELETE", "/admin/api/apps/\(app)/entitlements/gold").status == 200)
        let long = String(repeating: "x", count: 256)
        #expect(try await system.get(path: "/client/customers/\(long)").0 == 422)
    }

    @Test("The dashboard's entitlements page: an admin defines, grants and revokes from forms; a mistake names its field; each change audited")
    func dashboardPage() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let app = system.app.id.canonical
        let browser = DashboardPagesTests.Browser(system)
        _ = try await browser.logIn()
        let empty = try await browser.get("/admin/entitlements?app_id=\(app)")
        #expect(empty.status == 200 && empty.text.contains("id=\"catalogue-empty\""))
        let csrf = try #require(empty.csrf)

        // A mistake names its field and changes nothing.
        let bad = try await browser.post(
            "/admin/entitlements/define", [("csrf", csrf), ("app_id", app), ("entitlement", "Gold!"), ("products", "com.example.gold")])
        #expect(bad.status == 422 && bad.text.contains("entitlement must be"))
        let defined = try await browser.post(
            "/admin/entitlements/define",
            [
                ("csrf", csrf), ("app_id", app), ("entitlement", "gold"), ("products", "com.example.gold, com.example.gold.yearly"),
                ("description", "All of it"),
            ])
        #expect(defined.status == 303 && defined.location?.contains("done=defined") == true)

        // A user with a space in their id: the grant form keeps it whole.
        let user = "page user"
        let userPage = try await browser.get("/admin/entitlements?app_id=\(app)&user=page%20user")
        #expect(userPage.text.contains("id=\"entitlement-gold\"") && userPage.text.contains("com.example.gold.yearly"))
        #expect(userPage.text.contains("id=\"held-empty\"") && userPage.text.contains("id=\"grants-empty\""))
        let pastDay = try await browser.post(
            "/admin/entitlements/grant", [("csrf", csrf), ("app_id", app), ("user", user), ("entitlement", "gold"), ("expires_on", "2020-01-01")])
        #expect(pastDay.status == 422 && pastDay.text.contains("expires_on must be in the future"))
        let day = ISO8601DateFormatter.string(from: Date().addingTimeInterval(10 * 86_400), timeZone: .gmt, formatOptions: [.withFullDate])
        let granted = try await browser.post(
            "/admin/entitlements/grant",
            [("csrf", csrf), ("app_id", app), ("user", user), ("entitlement", "gold"), ("expires_on", day), ("reason", "ticket 7")])
        #expect(granted.status == 303, "\(granted.text)")
        let (_, customer) = try await system.get(path: "/client/customers/page%20user")
        #expect(customer?["entitlements"]?.arrayValue?.first?["id"]?.stringValue == "gold")
        let grantID = try #require(customer?["grants"]?.arrayValue?.first?["id"]?.stringValue)
        let held = try await browser.get(try #require(granted.location))
        #expect(held.text.contains("id=\"held-gold\"") && held.text.contains("\(day) 23:59:59") && held.text.contains("ticket 7"))
        #expect(held.text.contains("id=\"revoke-\(grantID)\""))

        let revoked = try await browser.post(
            "/admin/entitlements/revoke", [("csrf", csrf), ("app_id", app), ("user", user), ("grant", grantID)])
        #expect(revoked.status == 303 && revoked.location?.contains("done=revoked") == true)
        let after = try await browser.get(try #require(revoked.location))
        #expect(after.text.contains("id=\"held-empty\"") && !after.text.contains("id=\"revoke-\(grantID)\""))
        #expect(after.text.contains("Revoked, with an entitlement.revoked event."))

        let unconfirmed = try await browser.post("/admin/entitlements/remove", [("csrf", csrf), ("app_id", app), ("entitlement", "gold")])
        #expect(unconfirmed.location?.contains("done=unconfirmed") == true)
        let removed = try await browser.post(
            "/admin/entitlements/remove", [("csrf", csrf), ("app_id", app), ("entitlement", "gold"), ("confirm", "1")])
        #expect(removed.location?.contains("done=removed") == true)
        #expect(try await browser.get("/admin/entitlements?app_id=\(app)").text.contains("id=\"catalogue-empty\""))

        let pg = try system.postgres()
        defer { pg.close() }
        let audit = try await pg.query(
            "SELECT action, source FROM audit_log WHERE app_id = \(system.app.id) AND action LIKE 'entitlement.%' ORDER BY id"
        ).rows.map { "\($0.string("action") ?? "?") \($0.string("source") ?? "?")" }
        #expect(
            audit == ["entitlement.define dashboard", "entitlement.grant dashboard", "entitlement.revoke dashboard", "entitlement.remove dashboard"])
    }
}
