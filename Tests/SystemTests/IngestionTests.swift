import Curl
import DevTools
import Foundation
import Hiredis
import Libpq
import MockAppStore
import PostgresStore
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The client API's ingestion rules against real Redis, Postgres and the mock App Store: forged
/// receipts (402, stored as fraud, never sent to Apple), bundle ids, idempotency, results arriving
/// over the node's channel, and Redis being unreachable (503, nothing stored).
@Suite("Ingestion: signatures, bundle ids, idempotency, availability", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct IngestionTests {
    @Test("A receipt signed by a CA the operator does not trust: 402, stored as fraud, never sent to Apple")
    func forgedByUntrustedCA() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let stranger = try TestCertificateAuthority.generate(name: "Not Apple Root CA")
        let receipt = Data(try ReceiptForger.unified(ReceiptForger.demoReceipt(bundleID: system.app.bundleID), authority: stranger))
            .base64EncodedString()
        let calls = system.mock.state.requestCount(.production) + system.mock.state.requestCount(.sandbox)

        let (status, body) = try await system.post(#"{"receipt":"\#(receipt)","user_identifier":"mallory"}"#)
        #expect(status == 402)
        #expect(body?["is_fraud"] == .bool(true))
        #expect(body?["fraud_reason"]?.stringValue == "untrusted_chain")
        #expect(body?["validation_status"]?.stringValue == "fraud")
        #expect(body?["in_app_purchases"]?.arrayValue?.isEmpty == true, "a forged receipt's purchases are not shown as bought")
        let id = try #require(body?["id"]?.stringValue)

        let pg = try system.postgres()
        defer { pg.close() }
        let stored = try await eventually {
            try await pg.query("SELECT status FROM receipts WHERE id = \(UUID(uuidString: id)!)").rows.first?.string("status") == "fraud"
        }
        #expect(stored)
        let row = try #require(
            await pg.query(
                """
                SELECT is_fraud, fraud_reason, user_identifier, apple_status,
                       (SELECT count(*) FROM in_app_purchases WHERE receipt_id = receipts.id) AS purchases
                FROM receipts WHERE id = \(UUID(uuidString: id)!)
                """
            ).rows.first)
        #expect(row.bool("is_fraud") == true)
        #expect(row.string("fraud_reason") == "untrusted_chain")
        #expect(row.string("user_identifier") == "mallory")
        #expect(row.int("apple_status") == nil)
        #expect(row.int("purchases") == 0, "a forged receipt must not claim transaction ids in the ledger")
        #expect(system.mock.state.requestCount(.production) + system.mock.state.requestCount(.sandbox) == calls)
        let (readStatus, read) = try await system.get(id)
        #expect(readStatus == 200)
        #expect(read?["is_fraud"] == .bool(true))
    }

    @Test("A genuine receipt of a bundle id the app does not own: 402 bundle_id_not_registered")
    func foreignBundle() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let receipt = Data(
            try ReceiptForger.unified(ReceiptForger.demoReceipt(bundleID: "com.example.someone-else"), authority: system.authority)
        ).base64EncodedString()
        let (status, body) = try await system.post(#"{"receipt":"\#(receipt)"}"#)
        #expect(status == 402)
        #expect(body?["fraud_reason"]?.stringValue == "bundle_id_not_registered")
        #expect(body?["bundle_id"]?.stringValue == "com.example.someone-else")
    }

    @Test("An app family: a receipt of the app's other bundle id is validated, not refused")
    func appFamily() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let suffix = UUID().uuidString.prefix(8).lowercased()
        let pg = try system.postgres()
        defer { pg.close() }
        let (app, token) = try AppAdmin(connection: pg).addApp(
            name: "family-\(suffix)", bundleID: "com.example.family.ios.\(suffix)", otherBundleIDs: ["com.example.family.mac.\(suffix)"],
            sharedSecret: "integration-secret")
        #expect(app.bundleIDs == ["com.example.family.ios.\(suffix)", "com.example.family.mac.\(suffix)"])
        system.mock.state.setSharedSecret("integration-secret", for: "com.example.family.mac.\(suffix)")
        let receipt = Data(
            try ReceiptForger.unified(ReceiptForger.demoReceipt(bundleID: "com.example.family.mac.\(suffix)"), authority: system.authority)
        ).base64EncodedString()
        let (status, body) = try await system.post(#"{"receipt":"\#(receipt)"}"#, token: token)
        #expect(status == 200)
        #expect(body?["validation_status"]?.stringValue == "valid")
        #expect(body?["app_family_id"]?.stringValue?.lowercased() == app.id.uuidString.lowercased())
    }

    @Test("The same receipt twice, even concurrently: one id, one job, one row, one call to Apple")
    func idempotent() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (receipt, _) = try system.forgeReceipt()
        let body = #"{"receipt":"\#(receipt)","user_identifier":"u1"}"#
        let answers = try await withThrowingTaskGroup(of: (Int, JSONValue?).self) { group in
            for _ in 0..<8 { group.addTask { try await system.post(body) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let ids = Set(answers.compactMap { $0.1?["id"]?.stringValue })
        #expect(ids.count == 1, "every request gets the same receipt id")
        #expect(answers.allSatisfy { [200, 206].contains($0.0) })
        let id = try #require(ids.first)
        let pg = try system.postgres()
        defer { pg.close() }
        let validated = try await eventually { try await system.get(id).1?["validation_status"]?.stringValue == "valid" }
        #expect(validated)
        // Later duplicates answer 200 with the stored resource.
        let (again, resource) = try await system.post(body)
        #expect(again == 200)
        #expect(resource?["id"]?.stringValue == id)
        #expect(try await pg.query("SELECT count(*) AS n FROM receipts WHERE app_id = \(system.app.id)").rows.first?.int("n") == 1)
        // Production answers 21007 for a sandbox receipt, then the sandbox validates: one job's calls.
        #expect(system.mock.state.requestCount(.sandbox) == 1)
        // A different receipt is a new receipt.
        let (other, _) = try system.forgeReceipt()
        let (status, fresh) = try await system.post(#"{"receipt":"\#(other)"}"#)
        #expect(status == 200)
        #expect(fresh?["id"]?.stringValue != id)
    }

    @Test("Redis forgets the enqueue script (a restart, a failover): the next receipts are still queued once each")
    func scriptForgotten() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let redis = try system.redis()
        defer { redis.close() }
        // The first receipt makes the node load the script; the ones after the flush find it gone.
        let (first, _) = try system.forgeReceipt()
        #expect(try await [200, 206].contains(system.post(#"{"receipt":"\#(first)"}"#).0))
        #expect(try redis.send(["SCRIPT", "FLUSH"]) == .status("OK"))
        let (receipt, _) = try system.forgeReceipt()
        let body = #"{"receipt":"\#(receipt)","user_identifier":"u-flush"}"#
        let (status, answer) = try await system.post(body)
        #expect([200, 206].contains(status))
        let id = try #require(answer?["id"]?.stringValue)
        let validated = try await eventually { try await system.get(id).1?["validation_status"]?.stringValue == "valid" }
        #expect(validated)
        let (again, repeated) = try await system.post(body)
        #expect(again == 200)
        #expect(repeated?["id"]?.stringValue == id, "the script's idempotency holds after it was loaded again")
        let pg = try system.postgres()
        defer { pg.close() }
        #expect(try await pg.query("SELECT count(*) AS n FROM receipts WHERE app_id = \(system.app.id)").rows.first?.int("n") == 2)
    }

    @Test("A real Apple receipt passes the local signature check with Apple's roots; tampered bytes do not")
    func realReceipts() async throws {
        guard let corpus = TestEnvironment.appStoreTestData else {
            print("skipped: ../shared/testdata/appstore is absent")
            return
        }
        let system = try await TestSystem.start(environment: [
            "RECEIPTQ_TRUST_ROOTS_DIR": corpus.appendingPathComponent("certs").path, "API_SYNC_WAIT_MS": "0",
        ])
        defer { Task { await system.stop() } }
        let text = try String(contentsOf: corpus.appendingPathComponent("receipts/revenuecat-sandboxReceipt.b64"), encoding: .utf8)
        let pg = try system.postgres()
        defer { pg.close() }
        let (_, token) = try AppAdmin(connection: pg).addApp(
            name: "real-\(UUID().uuidString)", bundleID: "com.revenuecat.sampleapp", sharedSecret: "integration-secret")
        let (status, body) = try await system.post(#"{"receipt":"\#(text.trimmingCharacters(in: .whitespacesAndNewlines))"}"#, token: token)
        #expect(status == 206, "signed by Apple and of this app: queued for Apple")
        #expect(body?["is_fraud"] == .bool(false))
        #expect(body?["in_app_purchases"]?.arrayValue?.count == 9)

        // One byte of the signed payload changed (still a decodable receipt): the signature fails.
        var bytes = [UInt8](Data(base64Encoded: text.trimmingCharacters(in: .whitespacesAndNewlines))!)
        let needle = Array("com.revenuecat.sampleapp".utf8)
        let at = try #require((0...(bytes.count - needle.count)).first { Array(bytes[$0..<($0 + needle.count)]) == needle })
        bytes[at + 4] = UInt8(ascii: "R")
        let tampered = Data(bytes).base64EncodedString()
        let (_, otherToken) = try AppAdmin(connection: pg).addApp(
            name: "tampered-\(UUID().uuidString)", bundleID: "com.Revenuecat.sampleapp", sharedSecret: nil)
        let (forged, forgedBody) = try await system.post(#"{"receipt":"\#(tampered)"}"#, token: otherToken)
        #expect(forged == 402)
        #expect(forgedBody?["fraud_reason"]?.stringValue == "signature_mismatch")
    }

    @Test("Redis unreachable: 503 with Retry-After, nothing stored, and readiness says so")
    func redisDown() async throws {
        let system = try await TestSystem.start(environment: ["REDIS_PORT": "1", "API_SYNC_WAIT_MS": "0"])
        defer { Task { await system.stop() } }
        let (receipt, _) = try system.forgeReceipt()
        let response = try await system.client.send(
            Curl.HTTPRequest(
                method: "POST", url: system.receiptsURL,
                headers: [(name: "Content-Type", value: "application/json"), (name: "Authorization", value: "Bearer \(system.token)")],
                body: Array(#"{"receipt":"\#(receipt)"}"#.utf8)))
        #expect(response.status == 503)
        #expect(response.headers.contains { $0.name.lowercased() == "retry-after" })
        let ready = try await system.client.send(
            Curl.HTTPRequest(method: "GET", url: "http://127.0.0.1:\(system.apiPort)/health/ready", headers: [], body: []))
        #expect(ready.status == 503)
        let pg = try system.postgres()
        defer { pg.close() }
        #expect(try await pg.query("SELECT count(*) AS n FROM receipts WHERE app_id = \(system.app.id)").rows.first?.int("n") == 0)
    }
}
