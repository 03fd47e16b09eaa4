import DevTools
import Foundation
import Libpq
import MockAppStore
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Telemetry
import Testing

/// StoreKit 2 through the whole system: `POST /client/transactions` → Redis → a worker that asks
/// the mock App Store Server API with the app's JWT → Postgres → the entitlement API.
@Suite("StoreKit 2 and the App Store Server API, end to end", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct StoreKit2Tests {
    func signed(
        _ system: TestSystem, product: String = "com.example.yearly", days: Double? = 365, environment: String = "Sandbox"
    )
        throws -> (jws: String, payload: JSONValue)
    {
        try system.signedTransaction(product: product, days: days, environment: environment)
    }

    func body(_ fields: [String: JSONValue]) -> String {
        String(decoding: try! JSONEncoder().encode(JSONValue.object(fields)), as: UTF8.self)
    }

    @Test("A signed transaction ends valid in Postgres with its subscription and entitlement, asked of the Server API with a valid JWT")
    func signedTransaction() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (jws, payload) = try signed(system)
        let id = try #require(payload["transactionId"]?.stringValue)
        let (status, resource) = try await system.post(
            body(["signed_transaction": .string(jws), "user_identifier": .string("sk2-user"), "metadata": .object(["k": .string("v")])]),
            path: "/client/transactions")
        #expect(status == 200)
        #expect(resource?["validation_status"]?.stringValue == "valid")
        #expect(resource?["source"]?.stringValue == "signed_transaction")
        #expect(resource?["validated_by"]?.stringValue == "server_api")
        #expect(resource?["transaction_id"]?.stringValue == id)
        #expect(resource?["environment"]?.stringValue == "sandbox")
        #expect(resource?["in_app_purchases"]?.arrayValue?.first?["transaction_id"]?.stringValue == id)
        // The worker asked the mock (which refuses any call without a valid JWT): history, then statuses.
        #expect(system.mock.state.serverAPI.calls("sandbox history") == 1)
        #expect(system.mock.state.serverAPI.calls("sandbox statuses") == 1)
        #expect(system.mock.state.requestCount(.production) == 0)
        let (_, entitlements) = try await system.get(path: "/client/subscriptions?user_identifier=sk2-user")
        let subscription = try #require(entitlements?["subscriptions"]?.arrayValue?.first)
        #expect(subscription["status"]?.stringValue == "active")
        #expect(subscription["is_entitled"]?.boolValue == true)
        #expect(subscription["original_transaction_id"]?.stringValue == id)
        let connection = try system.postgres()
        defer { connection.close() }
        let row = try #require(
            try await connection.query("SELECT status, source, validated_by, receipt_data FROM receipts WHERE transaction_id = \(id)").rows.first)
        #expect(row.string("status") == "valid" && row.string("source") == "signed_transaction" && row.string("validated_by") == "server_api")
        #expect(row.string("receipt_data") == jws)
        // The same JWS again: the same resource, no second job.
        let (again, repeated) = try await system.post(body(["signed_transaction": .string(jws)]), path: "/client/transactions")
        #expect(again == 200)
        #expect(repeated?["id"] == resource?["id"])
    }

    @Test("A forged JWS is 402 with a named reason and stored as fraud; another app's is 402 bundle_id_mismatch; nothing reaches Apple")
    func forgeries() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (jws, _) = try signed(system)
        let parts = jws.split(separator: ".").map(String.init)
        var payload = try JSONDecoder().decode(JSONValue.self, from: Data(Base64URL.decode(parts[1])!)).objectValue!
        payload["productId"] = .string("com.example.lifetime")
        let tampered = "\(parts[0]).\(Base64URL.encode(Array(try JSONEncoder().encode(JSONValue.object(payload))))).\(parts[2])"
        let (status, resource) = try await system.post(body(["signed_transaction": .string(tampered)]), path: "/client/transactions")
        #expect(status == 402)
        #expect(resource?["fraud_reason"]?.stringValue == "invalid_signature")
        #expect(resource?["is_fraud"]?.boolValue == true)
        let stranger = try MockAppleJWSAuthority.generate()
        let (untrusted, _) = try ReceiptForger.signedTransaction(bundleID: system.app.bundleID, productID: "p", authority: stranger)
        let (status2, resource2) = try await system.post(body(["signed_transaction": .string(untrusted)]), path: "/client/transactions")
        #expect(status2 == 402)
        #expect(resource2?["fraud_reason"]?.stringValue == "untrusted_chain")
        let (other, _) = try ReceiptForger.signedTransaction(
            bundleID: "com.example.someone.else", productID: "p", authority: try TestSystem.sharedJWSAuthority.get())
        let (status3, resource3) = try await system.post(body(["signed_transaction": .string(other)]), path: "/client/transactions")
        #expect(status3 == 402)
        #expect(resource3?["fraud_reason"]?.stringValue == "bundle_id_mismatch")
        let stored = try await eventually {
            try await system.get(resource?["id"]?.stringValue ?? "").1?["validation_status"]?.stringValue == "fraud"
        }
        #expect(stored)
        #expect(system.mock.state.serverAPI.calls("production all") + system.mock.state.serverAPI.calls("sandbox all") == 0)
    }

    @Test("Bad transaction bodies are 422 naming the field; a bare transaction id is validated in the environment given or found")
    func transactionIDs() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        for (fields, field) in [
            ([:], "signed_transaction"), (["transaction_id": .string("12ab")], "transaction_id"),
            (["transaction_id": .number(12)], "transaction_id"), (["signed_transaction": .string("not a jws")], "signed_transaction"),
            (["signed_transaction": .string("a.b.c"), "transaction_id": .string("1")], "transaction_id"),
            (["transaction_id": .string("1"), "environment": .string("staging")], "environment"),
        ] as [([String: JSONValue], String)] {
            let (status, answer) = try await system.post(body(fields), path: "/client/transactions")
            #expect(status == 422, "\(fields)")
            #expect(answer?["errors"]?.arrayValue?.first?["field"]?.stringValue == field, "\(fields)")
        }
        let (_, payload) = try signed(system, product: "com.example.coins", days: nil, environment: "Production")
        let id = try #require(payload["transactionId"]?.stringValue)
        let (status, resource) = try await system.post(body(["transaction_id": .string(id)]), path: "/client/transactions")
        #expect(status == 200)
        #expect(resource?["environment"]?.stringValue == "production")
        #expect(resource?["in_app_purchases"]?.arrayValue?.count == 1)
        let (unknown, missing) = try await system.post(body(["transaction_id": .string("4999999999999")]), path: "/client/transactions")
        #expect(unknown == 200)
        #expect(missing?["validation_status"]?.stringValue == "invalid")
    }

    @Test("A subscription seen first by verifyReceipt and then by the Server API stays one row")
    func twoBackendsOneSubscription() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (receipt, decoded) = try system.forgeReceipt()
        let (status, first) = try await system.post(#"{"receipt":"\#(receipt)","user_identifier":"both"}"#)
        #expect(status == 200)
        #expect(first?["validated_by"]?.stringValue == "verify_receipt")
        system.mock.state.serverAPI.add(receipt: decoded, environment: .sandbox)
        let subscription = try #require(decoded.inApp.first { $0.expiresDate != nil })
        let (status2, second) = try await system.post(
            body(["transaction_id": .string(subscription.transactionID), "environment": .string("sandbox"), "user_identifier": .string("both")]),
            path: "/client/transactions")
        #expect(status2 == 200)
        #expect(second?["validated_by"]?.stringValue == "server_api")
        let connection = try system.postgres()
        defer { connection.close() }
        let rows = try await connection.query(
            "SELECT original_transaction_id FROM subscriptions WHERE app_id = \(system.app.id) AND original_transaction_id = \(subscription.originalTransactionID)"
        ).rows
        #expect(rows.count == 1)
        let purchases = try await connection.query(
            "SELECT count(*) AS n FROM in_app_purchases WHERE environment = 'sandbox' AND transaction_id = \(subscription.transactionID)"
        ).rows
        #expect(purchases.first?.int("n") == 1)
    }

    @Test("When verifyReceipt answers 410, an auto app with a key switches to the Server API once, and its receipts are validated there")
    func autoSwitch() async throws {
        let system = try await TestSystem.start(environment: ["VERIFY_RECEIPT_GONE_AFTER": "3"])
        defer { Task { await system.stop() } }
        system.mock.state.serverAPI.setVerifyReceiptLifecycle(.init(gone: true, goneStatus: 410))
        var ids: [String] = []
        for _ in 0..<4 {
            let (receipt, decoded) = try system.forgeReceipt()
            system.mock.state.serverAPI.add(receipt: decoded, environment: .sandbox)
            let (status, resource) = try await system.post(#"{"receipt":"\#(receipt)"}"#)
            #expect(status == 200 || status == 206)
            ids.append(try #require(resource?["id"]?.stringValue))
        }
        for id in ids {
            let validated = try await eventually(timeout: .seconds(30)) {
                try await system.get(id).1?["validated_by"]?.stringValue == "server_api"
            }
            #expect(validated, "\(id)")
        }
        let connection = try system.postgres()
        defer { connection.close() }
        let app = try #require(try await connection.query("SELECT switched_to_server_api_at FROM apps WHERE id = \(system.app.id)").rows.first)
        #expect(app.date("switched_to_server_api_at") != nil)
        let metrics = String(decoding: system.metrics.exposition(), as: UTF8.self)
        #expect(metrics.contains("receiptq_verify_receipt_gone 1"))
        #expect(metrics.contains("receiptq_backend_switches_total 1"))
        // No job was buried or spent an attempt on the 410s.
        #expect(try await system.get(path: "/admin/api/dead").0 != 500)
        // The operator sees it on the dashboard's overview, loudly.
        let browser = DashboardPagesTests.Browser(system)
        #expect(try await browser.logIn().status == 303)
        let overview = try await browser.get("/admin")
        #expect(overview.text.contains(#"class="banner banner-alarm" id="verify-receipt-banner""#))
        #expect(overview.text.contains("verifyReceipt is gone"))
    }

    @Test("verifyReceipt's Deprecation and Sunset headers are recorded and exported")
    func sunsetHeaders() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        system.mock.state.serverAPI.setVerifyReceiptLifecycle(
            .init(deprecation: "@1767225600", sunset: "Thu, 31 Dec 2099 23:59:59 GMT"))
        let (receipt, _) = try system.forgeReceipt()
        let (status, _) = try await system.post(#"{"receipt":"\#(receipt)"}"#)
        #expect(status == 200)
        let exported = try await eventually {
            let text = String(decoding: system.metrics.exposition(), as: UTF8.self)
            return text.contains("receiptq_verify_receipt_sunset_timestamp_seconds 4102444799")
                && text.contains("receiptq_verify_receipt_deprecation_timestamp_seconds 1767225600")
        }
        #expect(exported)
        // A far sunset is a note on the overview, not an alarm.
        let browser = DashboardPagesTests.Browser(system)
        #expect(try await browser.logIn().status == 303)
        let overview = try await browser.get("/admin")
        #expect(overview.text.contains(#"class="banner banner-notice" id="verify-receipt-banner""#))
        #expect(overview.text.contains("2099-12-31"))
    }
}
