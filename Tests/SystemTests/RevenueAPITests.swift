import Foundation
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// `GET /admin/api/apps/{app_id}/metrics` on a running system: a signed subscription posted by the
/// app shows in the day's figures once the worker stored it, and the doors refuse what they must.
@Suite("Revenue figures in the admin API", .enabled(if: TestEnvironment.integrationEnabled))
struct RevenueAPITests {
    let admin = AdminAPITests()

    @Test("A signed subscription is the day's gross, a new subscription, one active and its MRR; 422, 404 and 401 where due")
    func figures() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (jws, payload) = try system.signedTransaction(product: "com.example.monthly", days: 30)
        let purchased = Date(timeIntervalSince1970: Double(payload["purchaseDate"]?.intValue ?? 0) / 1000)
        let day = RevenueCalendar.text(purchased)
        let (status, _) = try await system.post(
            JSONValue.object(["signed_transaction": .string(jws), "user_identifier": .string("revenue-api")]).encodedText,
            path: "/client/transactions")
        #expect([200, 206].contains(status))
        let path = "/admin/api/apps/\(system.app.id.canonical)/metrics"
        var usd: JSONValue?
        let counted = try await eventually(timeout: .seconds(30)) {
            let answer = try await admin.send(system, "GET", "\(path)?from=\(day)&to=\(day)")
            usd = answer.json?["days"]?.arrayValue?.first { $0["currency"]?.stringValue == "USD" }
            return usd?["gross_milli"]?.intValue == 9_990
        }
        #expect(counted, "the purchase in the day's figures: \(String(describing: usd))")
        #expect(usd?["purchases"]?.intValue == 1 && usd?["new_subscriptions"]?.intValue == 1 && usd?["net_milli"]?.intValue == 9_990)

        for (query, field) in [("from=2027-02-30", "from"), ("from=2027-03-02&to=2027-03-01", "from"), ("from=2026-01-01&to=2027-06-01", "to")] {
            let refused = try await admin.send(system, "GET", "\(path)?\(query)")
            #expect(refused.status == 422 && refused.json?["errors"]?.arrayValue?.first?["field"]?.stringValue == field, "\(query)")
        }
        let defaultRange = try await admin.send(system, "GET", path)
        #expect(defaultRange.status == 200 && defaultRange.json?["to"]?.stringValue == RevenueCalendar.text(Date()))
        let today = defaultRange.json?["days"]?.arrayValue?.last { $0["currency"]?.stringValue == "USD" }
        #expect(today?["active_subscriptions"]?.intValue == 1 && today?["mrr_milli"]?.intValue == 9_990, "\(String(describing: today))")
        #expect(try await admin.send(system, "GET", "/admin/api/apps/\(UUID().uuidString)/metrics").status == 404)
        #expect(try await admin.send(system, "GET", path, authorization: nil).status == 401)
    }

    @Test("The dashboard's revenue page: the app's net, MRR and active subscriptions as SVG charts and a table; a wrong day names its field")
    func dashboardPage() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (jws, _) = try system.signedTransaction(product: "com.example.monthly", days: 30)
        let body = JSONValue.object(["signed_transaction": .string(jws), "user_identifier": .string("revenue-page")]).encodedText
        #expect([200, 206].contains(try await system.post(body, path: "/client/transactions").0))
        let browser = DashboardPagesTests.Browser(system)
        _ = try await browser.logIn()
        let app = system.app.id.canonical
        let shown = try await eventually(timeout: .seconds(30)) {
            let page = try await browser.get("/admin/revenue?app_id=\(app)")
            return page.status == 200 && page.text.contains("id=\"revenue-USD\"") && page.text.contains("gross 9.99")
        }
        #expect(shown, "the day's purchase on the page")
        let page = try await browser.get("/admin/revenue?app_id=\(app)")
        #expect(page.text.contains("<svg class=\"chart\"") && page.text.contains("class=\"s-mrr\"") && page.text.contains("<script") == false)
        #expect(page.text.contains("aria-current=\"page\">Revenue</a>"))
        let wrong = try await browser.get("/admin/revenue?app_id=\(app)&from=2027-02-30")
        #expect(wrong.status == 422 && wrong.text.contains("from must be a date"))
        #expect(try await browser.get("/admin/revenue?app_id=\(UUID().uuidString)").status == 404)
    }
}
