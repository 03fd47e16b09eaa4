import Curl
import DevTools
import Foundation
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

/// Issue 42's call budget through the whole system: `POST /client/transactions` → Redis → the
/// worker → the mock App Store Server API (whose counters are the calls) → Postgres.
@Suite("Call budget per validation and incremental history, end to end", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct CallBudgetTests {
    static let basic = "Basic " + Data("admin:receiptq-dev".utf8).base64EncodedString()

    /// A signed transaction of `original` (a new id each time), known to the mock, signed `age` ago.
    func purchase(
        _ system: TestSystem, original: String? = nil, product: String = "com.example.lifetime", age: TimeInterval = 0
    ) throws -> (jws: String, id: String, original: String) {
        let now = Date()
        let id = String(UInt64(now.timeIntervalSince1970 * 1_000_000) &* 10 &+ UInt64.random(in: 0...9))
        let ms = (now.timeIntervalSince1970 * 1000).rounded()
        let payload: [String: JSONValue] = [
            "transactionId": .string(id), "originalTransactionId": .string(original ?? id), "bundleId": .string(system.app.bundleID),
            "productId": .string(product), "purchaseDate": .number(ms), "originalPurchaseDate": .number(ms), "quantity": .number(1),
            "type": .string("Non-Consumable"), "inAppOwnershipType": .string("PURCHASED"),
            "signedDate": .number(ms - age * 1000), "environment": .string("Sandbox"), "transactionReason": .string("PURCHASE"),
            "storefront": .string("USA"), "storefrontId": .string("143441"),
        ]
        system.mock.state.serverAPI.add(transactions: [.object(payload)], environment: .sandbox)
        return (try TestSystem.sharedJWSAuthority.get().sign(.object(payload)), id, original ?? id)
    }

    func post(_ system: TestSystem, _ jws: String) async throws -> (Int, JSONValue?) {
        let body = String(decoding: try JSONEncoder().encode(JSONValue.object(["signed_transaction": .string(jws)])), as: UTF8.self)
        return try await system.post(body, path: "/client/transactions")
    }

    func calls(_ system: TestSystem) -> Int {
        system.mock.state.serverAPI.calls("sandbox all") + system.mock.state.serverAPI.calls("production all")
    }

    func setTrust(_ system: TestSystem, _ trust: JWSTrustChoice) throws {
        let connection = try PostgresConnection(configuration: system.configuration.postgres)
        defer { connection.close() }
        try AppAdmin(connection: connection).setJWSTrust(appID: system.app.id, trust: trust, freshness: nil)
    }

    @Test("jws_trust local: a fresh verified purchase is stored with no Apple call (validated_by local_jws); a forgery is still refused at the door")
    func localTrust() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        try setTrust(system, .local)
        let fresh = try purchase(system)
        let (status, resource) = try await post(system, fresh.jws)
        #expect(status == 200)
        #expect(resource?["validation_status"]?.stringValue == "valid")
        #expect(resource?["validated_by"]?.stringValue == "local_jws")
        #expect(resource?["in_app_purchases"]?.arrayValue?.first?["transaction_id"]?.stringValue == fresh.id)
        #expect(calls(system) == 0)
        // Tampered after Apple signed it: the door refuses it as before, and Apple is not asked.
        let parts = fresh.jws.split(separator: ".").map(String.init)
        var payload = try #require(try JSONValue.parse(Base64URL.decode(parts[1]) ?? []).objectValue)
        payload["productId"] = .string("com.example.other")
        let tampered = "\(parts[0]).\(Base64URL.encode(Array(try JSONEncoder().encode(JSONValue.object(payload))))).\(parts[2])"
        let (refused, answer) = try await post(system, tampered)
        #expect(refused == 402)
        #expect(answer?["fraud_reason"]?.stringValue == "invalid_signature")
        // A chain that is not Apple's is refused the same way.
        let (foreign, _) = try ReceiptForger.signedTransaction(
            bundleID: system.app.bundleID, productID: "p", authority: try MockAppleJWSAuthority.generate())
        let (untrusted, _) = try await post(system, foreign)
        #expect(untrusted == 402)
        #expect(calls(system) == 0)
        let connection = try system.postgres()
        defer { connection.close() }
        let row = try #require(try await connection.query("SELECT validated_by FROM receipts WHERE transaction_id = \(fresh.id)").rows.first)
        #expect(row.string("validated_by") == "local_jws")
        let attempts = try await connection.query(
            "SELECT count(*)::int AS n FROM validation_attempts a JOIN receipts r ON r.id = a.receipt_id WHERE r.transaction_id = \(fresh.id)")
        // No call, so no attempt row: the receipt's validated_by is what says it was trusted locally.
        #expect(attempts.rows.first?.int("n") == 0)
    }

    @Test("First sight reads the history and stores its revision; a later, stale purchase of that customer costs exactly one Get Transaction Info")
    func firstSightThenOneCall() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        try setTrust(system, .local)
        // Signed two days ago: older than the 24 h window, so Apple is asked even with local trust.
        let first = try purchase(system, age: 2 * 86_400)
        let (status, resource) = try await post(system, first.jws)
        #expect(status == 200)
        #expect(resource?["validated_by"]?.stringValue == "server_api")
        #expect(system.mock.state.serverAPI.calls("sandbox history") == 1)
        #expect(system.mock.state.serverAPI.calls("sandbox history from 0") == 1)
        let connection = try system.postgres()
        defer { connection.close() }
        let cursor = try await connection.query(
            """
            SELECT environment, revision FROM transaction_history_cursors
            WHERE app_id = \(system.app.id) AND original_transaction_id = \(first.original)
            """
        ).rows.first
        #expect(cursor?.string("environment") == "sandbox")
        #expect(cursor?.string("revision") == "1")

        let before = calls(system)
        let later = try purchase(system, original: first.original, product: "com.example.extra", age: 3 * 86_400)
        let (again, second) = try await post(system, later.jws)
        #expect(again == 200)
        #expect(second?["validation_status"]?.stringValue == "valid")
        #expect(second?["in_app_purchases"]?.arrayValue?.contains { $0["transaction_id"]?.stringValue == later.id } == true)
        #expect(calls(system) - before == 1)
        #expect(system.mock.state.serverAPI.calls("sandbox info") == 1)
        #expect(system.mock.state.serverAPI.calls("sandbox history") == 1)
    }

    @Test("A resync by the admin API and by the command line reads the history from its start, is audited, and replaces the revision")
    func resync() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let first = try purchase(system)
        _ = try await post(system, first.jws)
        #expect(system.mock.state.serverAPI.calls("sandbox history from 0") == 1)
        // A second transaction of the customer, which only a history read would bring.
        let more = try purchase(system, original: first.original, product: "com.example.more")
        let body = #"{"app_id":"\#(system.app.id.canonical)","original_transaction_id":"\#(first.original)","environment":"sandbox"}"#
        let response = try await system.client.send(
            Curl.HTTPRequest(
                method: "POST", url: "http://127.0.0.1:\(system.apiPort)/admin/api/history/resync",
                headers: [(name: "Authorization", value: Self.basic), (name: "Content-Type", value: "application/json")], body: Array(body.utf8)))
        #expect(response.status == 202)
        let answer = try JSONValue.parse(response.body)
        #expect(answer["status"]?.stringValue == "queued")
        let jobID = try #require(answer["job_id"]?.stringValue)
        #expect(
            try await eventually(timeout: .seconds(30)) { system.mock.state.serverAPI.calls("sandbox history from 0") == 2 },
            "the API's resync read the history from its start")
        let connection = try system.postgres()
        defer { connection.close() }
        #expect(
            try await eventually(timeout: .seconds(30)) {
                try await connection.query("SELECT 1 FROM receipts WHERE id = \(UUID(uuidString: jobID)!) AND status = 'valid'").rows.count == 1
            }, "the resync's job is stored")
        let purchases = try await connection.query(
            "SELECT 1 FROM in_app_purchases WHERE app_id = \(system.app.id) AND transaction_id = \(more.id)")
        #expect(purchases.rows.count == 1)
        let cursor = try await connection.query(
            "SELECT revision FROM transaction_history_cursors WHERE app_id = \(system.app.id) AND original_transaction_id = \(first.original)")
        #expect(cursor.rows.first?.string("revision") == "2")
        let audited = try await connection.query(
            "SELECT actor, outcome, source FROM audit_log WHERE action = 'customer.resync' AND app_id = \(system.app.id) ORDER BY id")
        #expect(audited.rows.map { $0.string("source") } == ["api"])
        // (The dashboard's and the command line's lines are checked below, after their resyncs.)
        #expect(audited.rows.first?.string("outcome") == "done")

        // Bad input is a 422 naming the field; an unknown app is a 404; nothing is queued.
        for (bad, field) in [
            (#"{"app_id":"\#(system.app.id.canonical)","original_transaction_id":"12ab"}"#, "original_transaction_id"),
            (#"{"app_id":"nope","original_transaction_id":"1"}"#, "app_id"),
            (#"{"app_id":"\#(system.app.id.canonical)","original_transaction_id":"1","environment":"xcode"}"#, "environment"),
        ] {
            let refused = try await system.client.send(
                Curl.HTTPRequest(
                    method: "POST", url: "http://127.0.0.1:\(system.apiPort)/admin/api/history/resync",
                    headers: [(name: "Authorization", value: Self.basic), (name: "Content-Type", value: "application/json")], body: Array(bad.utf8)))
            #expect(refused.status == 422)
            #expect(try JSONValue.parse(refused.body)["errors"]?.arrayValue?.first?["field"]?.stringValue == field)
        }
        let unknown = #"{"app_id":"\#(UUID().canonical)","original_transaction_id":"1"}"#
        let missing = try await system.client.send(
            Curl.HTTPRequest(
                method: "POST", url: "http://127.0.0.1:\(system.apiPort)/admin/api/history/resync",
                headers: [(name: "Authorization", value: Self.basic), (name: "Content-Type", value: "application/json")], body: Array(unknown.utf8)))
        #expect(missing.status == 404)

        // The dashboard's customer view: a "Resync history" button per purchase, CSRF-checked.
        let browser = DashboardPagesTests.Browser(system)
        _ = try await browser.logIn()
        let page = try await browser.get("/admin/customers?by=transaction&q=\(first.id)")
        #expect(page.text.contains("Resync history"))
        let token = try #require(page.csrf)
        let form = [
            ("app_id", system.app.id.canonical), ("original_transaction_id", first.original), ("environment", "sandbox"),
            ("return_q", first.id), ("return_by", "transaction"),
        ]
        #expect(try await browser.post("/admin/customers/resync", [("csrf", "forged")] + form).status == 403)
        let pressed = try await browser.post("/admin/customers/resync", [("csrf", token)] + form)
        #expect(pressed.status == 303)
        #expect(pressed.location?.contains("resync=queued") == true)
        #expect(
            try await eventually(timeout: .seconds(30)) { system.mock.state.serverAPI.calls("sandbox history from 0") == 3 },
            "the dashboard's resync read the history from its start")
        let notice = try await browser.get(try #require(pressed.location))
        #expect(notice.text.contains("History resync queued"))

        // The command line: the same job, from the start again, audited with source cli.
        let cli = system.commandLineEnvironment(["LOG_LEVEL": "warning"])
        let run = try await offload {
            try runProcess(
                ReceiptqExecutable.url,
                ["apps", "resync", "--name", system.app.name, "--original-transaction-id", first.original, "--environment", "sandbox"],
                environment: cli)
        }
        #expect(run.status == 0, "\(run.output)")
        #expect(run.output.contains("queued: "))
        #expect(
            try await eventually(timeout: .seconds(30)) { system.mock.state.serverAPI.calls("sandbox history from 0") == 4 },
            "the command line's resync read the history from its start")
        #expect(
            try await eventually(timeout: .seconds(10)) {
                try await connection.query("SELECT 1 FROM audit_log WHERE action = 'customer.resync' AND source = 'cli' AND outcome = 'done'").rows
                    .count >= 1
            }, "the command line's audit line is settled")
        let sources = try await connection.query(
            "SELECT source FROM audit_log WHERE action = 'customer.resync' AND app_id = \(system.app.id) AND outcome = 'done' ORDER BY id")
        #expect(sources.rows.map { $0.string("source") } == ["api", "dashboard", "cli"])
    }
}
