import Foundation
import Hiredis
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

/// The slice, through real Redis, Postgres, HTTP and the mock App Store.
@Suite("End to end: API → Redis → worker → mock App Store → Postgres", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct EndToEndTests {
    @Test("A sandbox receipt posted to the API is validated (production, then 21007 → sandbox) and stored")
    func slice() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (receipt, decoded) = try system.forgeReceipt()
        let (status, body) = try await system.post(
            #"{"receipt":"\#(receipt)","user_identifier":"user-1","country_code":"de","metadata":{"campaign":"x"},"ip_address":null,"unknown_field":1}"#
        )
        #expect(status == 200)
        let resource = try #require(body)
        #expect(resource["validation_status"]?.stringValue == "valid")
        #expect(resource["environment"]?.stringValue == "sandbox")
        #expect(resource["bundle_id"]?.stringValue == system.app.bundleID)
        #expect(resource["user_identifier"]?.stringValue == "user-1")
        #expect(resource["country_code"]?.stringValue == "DE")
        #expect(resource["ip_address"] == nil || resource["ip_address"] == .null)
        #expect(resource["metadata"]?["campaign"]?.stringValue == "x")
        #expect(resource["created_at"]?["ms"]?.intValue != nil)
        let purchases = try #require(resource["in_app_purchases"]?.arrayValue)
        #expect(Set(purchases.compactMap { $0["transaction_id"]?.stringValue }) == Set(decoded.inApp.map(\.transactionID)))
        let id = try #require(resource["id"]?.stringValue)

        // GET returns the same stored resource.
        let (getStatus, stored) = try await system.get(id)
        #expect(getStatus == 200)
        #expect(stored?["validation_status"]?.stringValue == "valid")
        #expect(stored?["in_app_purchases"]?.arrayValue?.count == 2)

        // And Postgres has the rows: the receipt, its purchases, and both Apple calls.
        let pg = try system.postgres()
        defer { pg.close() }
        let row = try #require(
            try await pg.query("SELECT status, environment, apple_status FROM receipts WHERE id = \(UUID(uuidString: id)!)").rows.first)
        #expect(row.string("status") == "valid")
        #expect(row.string("environment") == "sandbox")
        #expect(row.int("apple_status") == 0)
        let purchasesInDB = try await pg.query("SELECT count(*) AS n FROM in_app_purchases WHERE receipt_id = \(UUID(uuidString: id)!)").rows
        #expect(purchasesInDB.first?.int("n") == 2)
        let calls = try await pg.query(
            "SELECT endpoint, apple_status FROM validation_attempts WHERE receipt_id = \(UUID(uuidString: id)!) ORDER BY seq"
        ).rows
        #expect(calls.map { $0.string("endpoint") } == ["production", "sandbox"])
        #expect(calls.map { $0.int("apple_status") } == [21007, 0])
        #expect(system.mock.state.requestCount(.sandbox) == 1)
    }

    @Test("Another app's token cannot read the receipt (404), and a bad token gets 401 without detail")
    func isolation() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (receipt, _) = try system.forgeReceipt()
        let (_, body) = try await system.post(#"{"receipt":"\#(receipt)"}"#)
        let id = try #require(body?["id"]?.stringValue)
        let pg = try system.postgres()
        defer { pg.close() }
        let other = try AppAdmin(connection: pg).addApp(name: "other-\(UUID().uuidString)", bundleID: "com.example.other", sharedSecret: nil).1
        #expect(try await system.get(id, token: other).0 == 404)
        let (status, unauthorized) = try await system.get(id, token: "rq_not_a_token")
        #expect(status == 401)
        #expect(unauthorized?.objectValue?.keys.sorted() == ["error"])
        #expect(try await system.post(#"{"receipt":"\#(receipt)"}"#, token: "nope").0 == 401)
    }

    @Test("Bad input gets a clear 4xx naming the field, never a 5xx")
    func badInput() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (missing, errors) = try await system.post(#"{"user_identifier":"u"}"#)
        #expect(missing == 422)
        #expect(errors?["errors"]?.arrayValue?.first?["field"]?.stringValue == "receipt")
        let (garbage, garbageErrors) = try await system.post(#"{"receipt":"bm90IGEgcmVjZWlwdA=="}"#)
        #expect(garbage == 422)
        #expect(garbageErrors?["errors"]?.arrayValue?.first?["field"]?.stringValue == "receipt")
        let (receipt, _) = try system.forgeReceipt()
        let (fields, fieldErrors) = try await system.post(
            #"{"receipt":"\#(receipt)","country_code":"Germany","ip_address":"999.1.1.1","identifier_for_vendor":"x","metadata":[1]}"#)
        #expect(fields == 422)
        #expect(
            Set(fieldErrors?["errors"]?.arrayValue?.compactMap { $0["field"]?.stringValue } ?? [])
                == ["country_code", "ip_address", "identifier_for_vendor", "metadata"])
        #expect(try await system.post("not json").0 == 422)
        #expect(try await system.post("[]").0 == 422)
        #expect(try await system.post(#"{"receipt":"\#(receipt)"}"#, contentType: "text/plain").0 == 415)
        let huge = String(repeating: "A", count: 2 << 20)
        #expect(try await system.post(#"{"receipt":"\#(huge)"}"#).0 == 413)
    }

    @Test("Apple busy (21005) at first: 206 with the pending resource, then validated by a retry")
    func retryThenValid() async throws {
        let system = try await TestSystem.start(environment: ["API_SYNC_WAIT_MS": "300"])
        defer { Task { await system.stop() } }
        let (receipt, decoded) = try system.forgeReceipt()
        system.mock.state.addRule(MockRule(bundleID: system.app.bundleID, status: 21005, times: 1))
        let (status, pending) = try await system.post(#"{"receipt":"\#(receipt)"}"#)
        #expect(status == 206)
        #expect(pending?["validation_status"]?.stringValue == "pending")
        #expect(pending?["in_app_purchases"]?.arrayValue?.count == decoded.inApp.count)
        let id = try #require(pending?["id"]?.stringValue)
        let validated = try await eventually {
            try await system.get(id).1?["validation_status"]?.stringValue == "valid"
        }
        #expect(validated)
        let pg = try system.postgres()
        defer { pg.close() }
        let attempts = try await pg.query(
            "SELECT attempt, apple_status FROM validation_attempts WHERE receipt_id = \(UUID(uuidString: id)!) ORDER BY attempt, seq"
        ).rows
        // Attempt 0 ends at 21005 (production) and is not stored as a row until an attempt succeeds;
        // the successful attempt 1 records production 21007 then sandbox 0.
        #expect(attempts.last?.int("apple_status") == 0)
        #expect(attempts.last?.int("attempt") == 1)
    }

    @Test("A shared secret mismatch (21004) parks the job in the dead letters, and the receipt is failed with its code")
    func sharedSecretMismatch() async throws {
        let system = try await TestSystem.start(environment: ["API_SYNC_WAIT_MS": "300"])
        defer { Task { await system.stop() } }
        system.mock.state.setSharedSecret("rotated-in-app-store-connect", for: system.app.bundleID)
        let (receipt, _) = try system.forgeReceipt()
        let (status, pending) = try await system.post(#"{"receipt":"\#(receipt)"}"#)
        #expect(status == 206)
        let id = try #require(pending?["id"]?.stringValue)
        let redis = try system.redis()
        defer { redis.close() }
        let buried = try await eventually {
            try redis.send(["ZCARD", system.configuration.keys.dead]).int == 1
        }
        #expect(buried)
        let dead = try redis.send(["ZRANGE", system.configuration.keys.dead, "0", "-1"])
        let envelope = try JobEnvelope.decode(try #require(dead.array?.first.flatMap { if case .bulk(let b) = $0 { b } else { nil } }))
        #expect(envelope.errorCode == .sharedSecretMismatch)
        #expect(envelope.history.last?.appleStatus == 21004)
        // The dead letter keeps the receipt for a retry, but never the shared secret.
        #expect(!String(decoding: envelope.encoded(), as: UTF8.self).contains("integration-secret"))
        let (_, shown) = try await system.get(id)
        #expect(shown?["validation_status"]?.stringValue == "failed")
        #expect(shown?["error_code"]?.stringValue == "shared_secret_mismatch", "the dead letter's code")
    }

    @Test("Replaying a finished job changes nothing in Postgres")
    func replayIsIdempotent() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (receipt, _) = try system.forgeReceipt()
        let (status, body) = try await system.post(#"{"receipt":"\#(receipt)","user_identifier":"u"}"#)
        #expect(status == 200)
        let id = try #require(body?["id"]?.stringValue).lowercased()
        let pg = try system.postgres()
        defer { pg.close() }
        func snapshot() throws -> [String] {
            let uuid = UUID(uuidString: id)!
            let receipts = try pg.query("SELECT status, updated_at::text AS u FROM receipts WHERE id = \(uuid)").rows.map {
                "\($0.string("status") ?? "")|\($0.string("u") ?? "")"
            }
            let purchases = try pg.query("SELECT transaction_id, updated_at::text AS u FROM in_app_purchases WHERE receipt_id = \(uuid) ORDER BY 1")
                .rows
                .map { "\($0.string("transaction_id") ?? "")|\($0.string("u") ?? "")" }
            let attempts = try pg.query("SELECT count(*) AS n FROM validation_attempts WHERE receipt_id = \(uuid)").rows.map {
                "\($0.int("n") ?? -1)"
            }
            return receipts + purchases + attempts
        }
        let before = try snapshot()
        // Re-run the same job, as the janitor would after a crash between commit and acknowledge.
        let envelope = JobEnvelope(
            id: UUID(uuidString: id)!, appID: system.app.id, enqueuedAt: Date(), origin: .api,
            payload: .receipt(ReceiptJob(receipt: receipt, submission: Submission(userIdentifier: "u"))))
        let redis = try system.redis()
        defer { redis.close() }
        let settledBefore = system.jobsSettled
        _ = try redis.send(bytes: [Array("LPUSH".utf8), Array(system.configuration.keys.queue("validate").utf8), envelope.encoded()])
        // Run and settled (its commit came before), and nothing left that could run it again.
        let rerun = try await eventually { try system.jobsSettled > settledBefore && system.queuesIdle([.validate]) }
        #expect(rerun)
        #expect(try snapshot() == before)
    }
}
