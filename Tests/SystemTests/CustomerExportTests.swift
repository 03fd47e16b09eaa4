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
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let (user, alias, other) = ("export-\(suffix)", "export-old-\(suffix)", "export-other-\(suffix)")

        // A receipt under the old id, a StoreKit 2 subscription under the new one, merged; a grant.
        let (receipt, _) = try system.forgeReceipt()
        let (_, first) = try await system.post(#"{"receipt":"\#(receipt)","user_identifier":"\#(alias)"}"#)
        let receiptID = try #require(first?["id"]?.stringValue)
        let transaction = try system.signedTransaction()
        #expect(
            [200, 206].contains(
                try await system.post(
                    #"{"signed_transaction":"\#(transaction.jws)","user_identifier":"\#(user)"}"#, path: "/client/transactions"
                ).0))
        let (otherReceipt, _) = try system.forgeReceipt()
        let (_, third) = try await system.post(#"{"receipt":"\#(otherReceipt)","user_identifier":"\#(other)"}"#)
        let otherID = try #require(third?["id"]?.stringValue)
        let stored = try await eventually(timeout: .seconds(30)) {
            let (_, subscriptions) = try await system.get(path: "/client/subscriptions?user_identifier=\(user)")
            let mine = try await system.get(receiptID).1?["validation_status"]?.stringValue
            let theirs = try await system.get(otherID).1?["validation_status"]?.stringValue
            return mine == "valid" && theirs == "valid" && subscriptions?["subscriptions"]?.arrayValue?.isEmpty == false
        }
        #expect(stored)
        #expect(try await system.post(#"{"alias":"\#(alias)"}"#, path: "/client/users/\(user)/aliases").0 == 201)
        #expect(
            try await admin.send(system, "PUT", "/admin/api/apps/\(app)/entitlements/pro", body: #"{"products":["com.example.yearly"]}"#).status
                == 200)
        #expect(
            try await admin.send(system, "POST", "/admin/api/customers/\(app)/\(user)/grants", body: #"{"entitlement":"pro","reason":"export test"}"#)
                .status == 201)

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
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("export-\(suffix).json")
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
