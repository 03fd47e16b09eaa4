import Foundation
import Libpq
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The customer view's erase button: an operator erases after ticking the confirmation (the form
/// is CSRF-checked like the others); a viewer sees no button and is refused, with the refusal
/// audited, on the dashboard and on the admin API.
@Suite("Customer erasure from the dashboard (issue 44 item 3)", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct CustomerErasurePageTests {
    @Test("Viewers are refused (403, audited); an operator erases from the customer view once the box is ticked")
    func eraseButton() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let app = system.app.id.canonical
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let (customer, viewer) = ("page-erase-\(suffix)", "erase-viewer-\(suffix)")
        let (receipt, _) = try system.forgeReceipt()
        let (_, posted) = try await system.post(#"{"receipt":"\#(receipt)","user_identifier":"\#(customer)"}"#)
        let receiptID = try #require(posted?["id"]?.stringValue)
        #expect(try await eventually(timeout: .seconds(30)) { try await system.get(receiptID).1?["validation_status"]?.stringValue == "valid" })
        let view = "/admin/customers?by=user&app_id=\(app)&q=\(customer)"

        // A viewer: no button, and the form and the API refuse it, each refusal audited.
        #expect(try await OperatorTests().operators(["add", viewer, "--role", "viewer"]).status == 0)
        let viewerBrowser = DashboardPagesTests.Browser(system)
        #expect(try await viewerBrowser.logIn(username: viewer, password: OperatorTests.password).location == "/admin")
        let viewerPage = try await viewerBrowser.get(view)
        #expect(viewerPage.status == 200 && viewerPage.text.contains("customer-receipts") && !viewerPage.text.contains("customer-erase"))
        let refused = try await viewerBrowser.post(
            "/admin/customers/erase", [("csrf", viewerPage.csrf ?? ""), ("app_id", app), ("user_identifier", customer), ("confirm", "1")])
        #expect(refused.status == 403)
        let api = try await OperatorTests().send(system, "DELETE", "/admin/api/customers/\(app)/\(customer)", user: viewer)
        #expect(api.status == 403)
        let pg = try system.postgres()
        defer { pg.close() }
        let denied = try await pg.query(
            "SELECT source FROM audit_log WHERE actor = \(viewer) AND action = 'access.denied' ORDER BY id"
        ).rows.compactMap { $0.string("source") }
        #expect(denied == ["dashboard", "api"])
        #expect(try await pg.query("SELECT count(*) AS n FROM receipts WHERE user_identifier = \(customer)").rows.first?.int("n") == 1)

        // The operator (the built-in admin): the button; without the box ticked nothing happens;
        // without the form's CSRF token neither; with both, the customer is erased.
        let browser = DashboardPagesTests.Browser(system)
        _ = try await browser.logIn()
        let page = try await browser.get(view)
        #expect(page.text.contains("id=\"customer-erase\""))
        let fields = [("app_id", app), ("user_identifier", customer)]
        let unticked = try await browser.post("/admin/customers/erase", [("csrf", page.csrf ?? "")] + fields)
        #expect(unticked.status == 303 && unticked.location?.contains("erased=unconfirmed") == true)
        let forged = try await browser.post("/admin/customers/erase", [("csrf", "forged")] + fields + [("confirm", "1")])
        #expect(forged.status == 403)
        #expect(try await pg.query("SELECT count(*) AS n FROM receipts WHERE user_identifier = \(customer)").rows.first?.int("n") == 1)
        let erased = try await browser.post("/admin/customers/erase", [("csrf", page.csrf ?? "")] + fields + [("confirm", "1")])
        #expect(erased.status == 303 && erased.location?.contains("erased=done") == true)
        let after = try await browser.get(view + "&erased=done")
        // Left: the erasure's own event, which names the user for the backend.
        #expect(after.text.contains("Customer erased") && !after.text.contains("customer-receipts") && after.text.contains("customer.erased"))
        #expect(try await pg.query("SELECT count(*) AS n FROM receipts WHERE user_identifier = \(customer)").rows.first?.int("n") == 0)
        let line = try await pg.query(
            "SELECT source, target FROM audit_log WHERE app_id = \(system.app.id) AND action = 'customer.erase'"
        ).rows.first
        #expect(line?.string("source") == "dashboard" && line?.string("target")?.hasPrefix("erasure ") == true)
    }
}
