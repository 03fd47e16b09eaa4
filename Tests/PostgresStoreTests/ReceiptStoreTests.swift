import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The worker's batched store against real Postgres: one transaction per batch, set-based
/// statements, idempotent, and a record the database refuses fails alone.
@Suite("Postgres receipt store: group commit", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct ReceiptStoreTests {
    let configuration: AppConfiguration
    let connection: PostgresConnection
    let app: AppRecord

    init() throws {
        (configuration, connection, app) = try TestSystem.newApp(named: "store", bundleID: "com.example.store")
    }

    func record(
        user: String?, transactions: [String], appID: UUID? = nil, metadata: JSONValue? = nil, latestReceipt: String? = nil,
        id: UUID = JobID.make()
    ) -> ValidationRecord {
        let envelope = JobEnvelope(
            id: id, appID: appID ?? app.id, enqueuedAt: Date(timeIntervalSince1970: 1_800_000_000), origin: .api,
            payload: .receipt(
                ReceiptJob(
                    receipt: "MIIreceipt", style: .unified, bundleID: "com.example.store",
                    submission: Submission(userIdentifier: user, countryCode: "FR", metadata: metadata))))
        let purchases = transactions.map { id in
            InAppPurchase(
                quantity: 1, productID: "p", transactionID: id, originalTransactionID: id,
                purchaseDate: Date(timeIntervalSince1970: 1_700_000_000), originalPurchaseDate: nil, expiresDate: nil,
                cancellationDate: nil, webOrderLineItemID: nil, isTrialPeriod: false, isInIntroOfferPeriod: false)
        }
        return ValidationRecord(
            envelope: envelope, status: .valid, environment: "sandbox", appleStatus: 0, purchases: purchases,
            latestReceipt: latestReceipt,
            calls: [AppleCall(endpoint: .production, httpStatus: 200, appleStatus: 21007, isRetryable: nil, latencyMs: 3, errorCode: nil)],
            validatedAt: Date(timeIntervalSince1970: 1_800_000_001))
    }

    @Test("One batch: a shared transaction is flagged as a conflict, a replay in the same batch is harmless")
    func conflictsAndDuplicatesInOneBatch() throws {
        let tx = "tx-\(UUID().uuidString)"
        let first = record(user: "alice", transactions: [tx, "own-\(UUID().uuidString)"])
        let second = record(user: "bob", transactions: [tx])
        let store = PostgresReceiptStore(connection: connection)
        // The first record twice: a job queued twice and decided in the same batch.
        let results = try store.save([first, second, first])
        let resources = try results.map { try #require(try $0.get()) }
        #expect(resources.map(\.id) == [first.envelope.id, second.envelope.id, first.envelope.id])
        #expect(resources[0].inAppPurchases.count == 2)
        #expect(resources[0].inAppPurchases.allSatisfy { !$0.isConflict })
        #expect(resources[1].inAppPurchases.map(\.isConflict) == [true])

        let ledger = try connection.query(
            "SELECT user_identifier, conflict_user_identifier, is_conflict FROM in_app_purchases WHERE transaction_id = \(tx)"
        ).rows
        #expect(ledger.count == 1)
        #expect(ledger.first?.string("user_identifier") == "alice")
        #expect(ledger.first?.string("conflict_user_identifier") == "bob")
        #expect(ledger.first?.bool("is_conflict") == true)
        let attempts = try connection.query(
            "SELECT count(*) AS n FROM validation_attempts WHERE receipt_id = ANY(\("{\(first.envelope.id),\(second.envelope.id)}")::uuid[])"
        ).rows.first?.int("n")
        #expect(attempts == 2)

        // Replaying the whole batch changes nothing, not even updated_at.
        let before = try connection.query("SELECT updated_at FROM receipts WHERE id = \(first.envelope.id)").rows.first?.string("updated_at")
        _ = try store.save([first, second])
        let after = try connection.query("SELECT updated_at FROM receipts WHERE id = \(first.envelope.id)").rows.first?.string("updated_at")
        #expect(before != nil && before == after)
    }

    @Test("A record Postgres refuses (its app is gone) fails alone; the rest of the batch is stored")
    func refusedRecordFailsAlone() throws {
        let good1 = record(user: "u1", transactions: ["a-\(UUID().uuidString)"])
        let orphan = record(user: "u2", transactions: ["b-\(UUID().uuidString)"], appID: UUID())
        let good2 = record(user: "u3", transactions: [])
        let results = try PostgresReceiptStore(connection: connection).save([good1, orphan, good2])
        #expect((try? results[0].get())?.id == good1.envelope.id)
        #expect((try? results[2].get())?.id == good2.envelope.id)
        guard case .failure(let failure) = results[1] else {
            Issue.record("the record of an unknown app must fail")
            return
        }
        #expect(failure.code == .sqlState("23503"))  // foreign_key_violation
        #expect(!failure.message.contains("MIIreceipt"))
        let stored = try connection.query(
            "SELECT count(*) AS n FROM receipts WHERE id = ANY(\("{\(good1.envelope.id),\(orphan.envelope.id),\(good2.envelope.id)}")::uuid[])"
        ).rows.first?.int("n")
        #expect(stored == 2)
    }

    @Test("Quotes, backslashes, braces, commas and NULLs survive the array parameters; an echoed receipt is not stored twice")
    func awkwardValuesRoundTrip() throws {
        let user = #"a"b\c,{d} NULL"#
        let metadata: JSONValue = .object(["note": .string(#"say "hi", {ok}\"#), "n": .number(3)])
        let echoed = record(user: user, transactions: [#"t"x\,{}"# + UUID().uuidString], metadata: metadata, latestReceipt: "MIIreceipt")
        let fresh = record(user: nil, transactions: [], latestReceipt: "MIInewer")
        let results = try PostgresReceiptStore(connection: connection).save([echoed, fresh])
        let resource = try #require(try results[0].get())
        #expect(resource.userIdentifier == user)
        #expect(resource.metadata == metadata)
        #expect(resource.inAppPurchases.map(\.transactionID) == echoed.purchases.map(\.transactionID))
        #expect(try results[1].get()?.userIdentifier == nil)
        let rows = try connection.query(
            "SELECT id, latest_receipt FROM receipts WHERE id = ANY(\("{\(echoed.envelope.id),\(fresh.envelope.id)}")::uuid[])"
        ).rows
        let latest = Dictionary(uniqueKeysWithValues: rows.compactMap { row in row.uuid("id").map { ($0, row.string("latest_receipt")) } })
        #expect(latest[echoed.envelope.id] == .some(nil))
        #expect(latest[fresh.envelope.id] == .some("MIInewer"))
    }

    @Test("A receipt that ends valid keeps no error code from an earlier attempt; its attempts keep the history")
    func validClearsEarlierErrorCode() throws {
        var earlier = record(user: nil, transactions: [])
        let failedCall = AppleCall(endpoint: .production, httpStatus: 200, appleStatus: 21008, isRetryable: nil, latencyMs: 4, errorCode: nil)
        earlier.envelope = earlier.envelope.failed(code: .apple(21008), message: "x", calls: [failedCall], at: Date())
        var invalid = record(user: nil, transactions: [])
        invalid.status = .invalid
        invalid.errorCode = .apple(21002)
        let store = PostgresReceiptStore(connection: connection)
        _ = try store.save([earlier, invalid])
        let rows = try connection.query(
            "SELECT id, error_code FROM receipts WHERE id = ANY(\("{\(earlier.envelope.id),\(invalid.envelope.id)}")::uuid[])"
        ).rows
        let codes = Dictionary(uniqueKeysWithValues: rows.compactMap { row in row.uuid("id").map { ($0, row.string("error_code")) } })
        #expect(codes[earlier.envelope.id] == .some(nil))
        #expect(codes[invalid.envelope.id] == .some("apple_21002"))
    }

    @Test("The receipt look-up of a dead-lettered job shows its stored error code; an invalid or valid receipt's shows none")
    func deadLetterLookupShowsItsCode() async throws {
        var dead = record(user: nil, transactions: [])
        dead.status = .failed
        dead.errorCode = .sharedSecretMismatch
        var invalid = record(user: nil, transactions: [])
        invalid.status = .invalid
        invalid.errorCode = .apple(21002)
        let valid = record(user: nil, transactions: [])
        let saved = try PostgresReceiptStore(connection: connection).save([dead, invalid, valid])
        #expect(try saved[0].get()?.errorCode == .sharedSecretMismatch, "as the worker's answer shows it")
        let pool = PostgresConnectionPool(configuration: configuration.postgres, size: 1)
        defer { pool.close() }
        let catalog = PostgresCatalog(pool: pool)
        let shown = try #require(try await catalog.receipt(id: dead.envelope.id, appID: app.id))
        #expect(shown.validationStatus == .failed)
        #expect(shown.errorCode == .sharedSecretMismatch)
        let json = try #require(JSONValue.parseLeniently(shown.encoded()))
        #expect(json["error_code"] == .string("shared_secret_mismatch"))
        #expect(try await catalog.receipt(id: invalid.envelope.id, appID: app.id)?.errorCode == nil, "Apple's status says why")
        let validShown = try #require(try await catalog.receipt(id: valid.envelope.id, appID: app.id))
        #expect(validShown.errorCode == nil)
        #expect(JSONValue.parseLeniently(validShown.encoded())?["error_code"] == nil, "absent, not null")
    }
}
