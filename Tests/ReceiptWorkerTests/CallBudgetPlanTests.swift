import DevTools
import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

@testable import ReceiptWorker

/// Issue 42's call budget in the planner (mock clock): which Server API call a StoreKit 2 job
/// makes, if any, given the app's trust, the JWS's age and whether the customer was seen.
@Suite("Job planner: the call budget per validation (mock clock)")
struct CallBudgetPlanTests {
    let clock = MockClock()
    var planner: JobPlanner { JobPlanner(retryPolicy: RetryPolicy(), now: clock.closure) }
    static let authority = Result { try MockAppleJWSAuthority.generate() }
    let key = ServerAPIKey(issuerID: "issuer", keyID: "KEY123", privateKeyPEM: "-----BEGIN PRIVATE KEY-----\nsecret\n-----END PRIVATE KEY-----")

    func app(trust: JWSTrust? = nil, notifications: Bool = false) -> AppRecord {
        var app = AppRecord(id: UUID(), name: "a", bundleID: "com.example.a", sharedSecret: nil, backend: .serverAPI, serverAPIKey: key)
        app.jwsTrust = JWSTrustSettings(trust: trust)
        app.receivesNotifications = notifications
        return app
    }

    /// A door-verified signed transaction job of customer `original`, signed `age` ago.
    func job(
        age: TimeInterval = 60, subscription: Bool = false, original: String = "2000000001", origin: JobOrigin = .api, fraud: String? = nil
    ) throws -> JobEnvelope {
        let signed = (clock.now.timeIntervalSince1970 - age) * 1000
        var payload: [String: JSONValue] = [
            "transactionId": .string("2000000009"), "originalTransactionId": .string(original), "bundleId": .string("com.example.a"),
            "productId": .string(subscription ? "monthly" : "lifetime"), "purchaseDate": .number(signed.rounded()),
            "originalPurchaseDate": .number(signed.rounded()), "quantity": .number(1),
            "type": .string(subscription ? "Auto-Renewable Subscription" : "Non-Consumable"), "inAppOwnershipType": .string("PURCHASED"),
            "signedDate": .number(signed.rounded()), "environment": .string("Production"),
        ]
        if subscription { payload["expiresDate"] = .number((clock.now.timeIntervalSince1970 + 86_400 * 30) * 1000) }
        let jws = try Self.authority.get().sign(.object(payload))
        return JobEnvelope(
            id: JobID.make(), appID: UUID(), enqueuedAt: clock.now, origin: origin,
            payload: .transaction(
                TransactionJob(
                    signedTransaction: jws, transactionID: fraud == nil ? "2000000009" : nil, bundleID: "com.example.a",
                    environment: "production", fraudReason: fraud)))
    }

    let seen = HistoryCursor(originalTransactionID: "2000000001", environment: .production, revision: "7")

    func start(_ envelope: JobEnvelope, app: AppRecord, cursor: HistoryCursor? = nil) throws -> JobStart {
        planner.start(envelope, try #require(ValidationJob(envelope.payload)), app: app, historyCursor: cursor)
    }

    func query(_ start: JobStart) -> ServerAPIQuery? {
        guard case .call(let request, _) = start else { return nil }
        return request.serverAPI
    }

    @Test("The default trust is local for an app with V2 notifications, else apple; an operator's choice wins")
    func defaults() {
        #expect(app(notifications: true).effectiveJWSTrust == .local)
        #expect(app().effectiveJWSTrust == .apple)
        #expect(app(trust: .apple, notifications: true).effectiveJWSTrust == .apple)
        #expect(app(trust: .local).effectiveJWSTrust == .local)
        let settings = JWSTrustSettings()
        #expect(settings.freshness == 86_400)
        #expect(settings.isFresh(signedDate: clock.now.addingTimeInterval(-86_000), at: clock.now))
        #expect(!settings.isFresh(signedDate: clock.now.addingTimeInterval(-86_401), at: clock.now))
        #expect(!settings.isFresh(signedDate: clock.now.addingTimeInterval(600), at: clock.now))
    }

    @Test("local and fresh: stored without a call, validated_by local_jws, with the purchase and its subscription; no cursor looked up")
    func localFresh() throws {
        let local = app(notifications: true)
        let envelope = try job(subscription: true)
        #expect(planner.historyKey(envelope, try #require(ValidationJob(envelope.payload)), app: local) == nil)
        guard case .settle(.store(let record)) = try start(envelope, app: local) else {
            Issue.record("a fresh verified JWS of a local app is stored at once")
            return
        }
        #expect(record.calls.isEmpty)
        #expect(record.validatedBy == .localJWS)
        #expect(record.status == .valid)
        #expect(record.environment == "production")
        #expect(record.purchases.map(\.transactionID) == ["2000000009"])
        #expect(record.subscriptions.first?.state.originalTransactionID == "2000000001")
        #expect(record.subscriptions.first?.nextPollAt != nil)
    }

    @Test(
        "Stale, or trust apple: a seen customer costs one call (statuses for a subscription, else Get Transaction Info); first sight reads the history"
    )
    func oneCall() throws {
        for (trust, age) in [(JWSTrust.local, 2 * 86_400.0), (.apple, 60)] {
            let stale = try job(age: age)
            #expect(planner.historyKey(stale, try #require(ValidationJob(stale.payload)), app: app(trust: trust)) == "2000000001")
            #expect(try query(start(stale, app: app(trust: trust), cursor: seen))?.operation == .transactionInfo)
            #expect(try query(start(try job(age: age, subscription: true), app: app(trust: trust), cursor: seen))?.operation == .statuses)
            let first = try #require(try query(start(stale, app: app(trust: trust))))
            #expect(first.operation == .history)
            #expect(first.historyCursor == nil)
            #expect(first.historyKey == "2000000001")
            #expect(first.transactionID == "2000000009")
        }
    }

    @Test("A resync reads from the start whatever was stored; an import reads on from the stored revision; a forgery never asks")
    func resyncAndImport() throws {
        let resync = try job(origin: .resync)
        #expect(planner.historyKey(resync, try #require(ValidationJob(resync.payload)), app: app(trust: .local)) == nil)
        let fromStart = try #require(try query(start(resync, app: app(trust: .local), cursor: seen)))
        #expect(fromStart.operation == .history)
        #expect(fromStart.historyCursor == nil)
        #expect(fromStart.historyKey == "2000000009")

        let bare = JobEnvelope(
            id: JobID.make(), appID: UUID(), enqueuedAt: clock.now, origin: .api,
            payload: .transaction(TransactionJob(signedTransaction: nil, transactionID: "2000000001", environment: "production")))
        #expect(try query(start(bare, app: app(), cursor: seen))?.operation == .transactionInfo)
        let firstBare = try #require(try query(start(bare, app: app())))
        #expect(firstBare.operation == .history && firstBare.historyKey == "2000000001")

        let item = JobEnvelope(
            id: JobID.make(), appID: UUID(), enqueuedAt: clock.now, origin: .cli,
            payload: .importItem(
                ImportItem(
                    importID: UUID(), emitsEvents: false,
                    purchase: .transaction(TransactionJob(signedTransaction: nil, transactionID: "2000000001", environment: "production")))))
        let imported = try #require(try query(start(item, app: app(trust: .local), cursor: seen)))
        #expect(imported.operation == .history)
        #expect(imported.historyCursor == seen)

        // The door found this one forged (it names no transaction): never trusted, never stored valid.
        let forged = try job(fraud: "invalid_signature")
        #expect(planner.historyKey(forged, try #require(ValidationJob(forged.payload)), app: app(trust: .local)) == nil)
        switch try start(forged, app: app(trust: .local)) {
        case .settle(.store(let record)): Issue.record("a forged JWS was stored as \(record.status)")
        case .call: Issue.record("a forged JWS was sent to Apple")
        case .settle: break
        }
    }
}
