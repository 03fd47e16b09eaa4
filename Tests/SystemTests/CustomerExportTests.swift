import Foundation
import Libpq
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// An access request answered: `GET /admin/api/customers/{app}/{user}/export` and `receiptq
/// customers export` write everything receiptq holds about a user, merged ids included, and
/// nothing of anybody else's.
@Suite("Customer data export (issue 44 item 4)", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct CustomerExportTests {
    let admin = AdminAPITests()

    @Test("The export holds the user's receipts, purchases, subscriptions, events, grants and aliases, audited; another user's are not in it")
    func exportsEverythingOfTheUserOnly() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let app = system.app.id.canonical
        let customer = try await MergedCustomer.make(system, prefix: "export", reason: "export test")
        let (user, alias, other, receiptID, otherID) = (customer.user, customer.alias, customer.other, customer.receiptID, customer.otherID)

        let answer = try await admin.send(system, "GET", "/admin/api/customers/\(app)/\(alias)/export")
        #expect(answer.status == 200 && answer.header("Content-Type")?.hasPrefix("application/json") == true)
        let document = try #require(answer.json, "the export is one JSON document: \(String(decoding: answer.body.prefix(300), as: UTF8.self))")
        #expect((document["customer_ids"]?.arrayValue ?? []).compactMap(\.stringValue).sorted() == [alias, user].sorted())
        func rows(_ section: String) -> [JSONValue] { document[section]?.arrayValue ?? [] }
        let receiptIDs = rows("receipts").compactMap { $0["id"]?.stringValue }
        #expect(receiptIDs.contains(receiptID))
        #expect(rows("receipts").count == 2, "the alias's receipt and the user's transaction")
        #expect(!rows("purchases").isEmpty && !rows("subscriptions").isEmpty && !rows("apple_calls").isEmpty)
        #expect(rows("aliases").first?["alias"]?.stringValue == alias)
        #expect(rows("entitlement_grants").first?["reason"]?.stringValue == "export test")
        #expect(!rows("events").isEmpty)
        #expect(rows("audit").contains { $0["action"]?.stringValue == "customer.export" }, "the export's own line is in it")
        let text = String(decoding: answer.body, as: UTF8.self)
        #expect(!text.contains(otherID) && !text.contains(other), "nothing of another user")

        // The command line writes the same sections, and its own audit line.
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("\(user).json")
        defer { try? FileManager.default.removeItem(at: file) }
        let run = try await OperatorTests().receiptq(["customers", "export", "--app", system.app.name, "--user", user, "--output", file.path])
        #expect(run.status == 0, "\(run.output)")
        let written = try JSONDecoder().decode(JSONValue.self, from: Data(contentsOf: file))
        #expect(written["receipts"]?.arrayValue?.count == 2 && written["subscriptions"]?.arrayValue?.count == rows("subscriptions").count)
        let pg = try system.postgres()
        defer { pg.close() }
        let lines = try await pg.query(
            "SELECT source FROM audit_log WHERE app_id = \(system.app.id) AND action = 'customer.export' ORDER BY id"
        ).rows.compactMap { $0.string("source") }
        #expect(lines == ["api", "cli"])
    }
}
