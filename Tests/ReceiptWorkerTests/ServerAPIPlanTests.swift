import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

@testable import ReceiptWorker

@Suite("Job planner: which Apple API a job asks, and what the Server API's answer means (mock clock)")
struct ServerAPIPlanTests {
    let clock = MockClock()
    var planner: JobPlanner { JobPlanner(retryPolicy: RetryPolicy(), now: clock.closure) }
    let key = ServerAPIKey(issuerID: "issuer", keyID: "KEY123", privateKeyPEM: "-----BEGIN PRIVATE KEY-----\nsecret\n-----END PRIVATE KEY-----")

    func app(backend: ValidationBackend = .auto, key: ServerAPIKey? = nil, switched: Bool = false) -> AppRecord {
        AppRecord(
            id: UUID(), name: "a", bundleID: "com.example.a", sharedSecret: "s", backend: backend,
            switchedToServerAPIAt: switched ? clock.now : nil, serverAPIKey: key)
    }

    func job(source: JobSource? = nil, transactionID: String? = nil, environment: String? = nil, target: RepollTarget? = nil) -> JobEnvelope {
        let payload: JobPayload
        if let target {
            payload = .repoll(
                RepollJob(target: target, latestReceipt: "MII", style: .unified, bundleID: "com.example.a", environment: environment))
        } else if let source, source != .receipt {
            payload = .transaction(
                TransactionJob(
                    signedTransaction: source == .signedTransaction ? "MII" : nil, transactionID: transactionID, bundleID: "com.example.a",
                    environment: environment))
        } else {
            payload = .receipt(
                ReceiptJob(receipt: "MII", style: .unified, bundleID: "com.example.a", environment: environment, transactionID: transactionID))
        }
        return JobEnvelope(id: JobID.make(), appID: UUID(), enqueuedAt: clock.now, origin: .api, payload: payload)
    }

    @Test("Receipts go to verifyReceipt until the app is on the Server API, then by the checked receipt's transaction id")
    func receiptRouting() throws {
        guard case .call(let legacy, _) = planner.start(job(transactionID: "2000000001"), app: app(key: key)) else {
            Issue.record("a receipt of an auto app is a call")
            return
        }
        #expect(legacy.serverAPI == nil)
        #expect(legacy.sharedSecret == "s")
        for serverApp in [app(backend: .serverAPI, key: key), app(backend: .auto, key: key, switched: true)] {
            guard case .call(let request, _) = planner.start(job(transactionID: "2000000001"), app: serverApp) else {
                Issue.record("a receipt of a server_api app is a call")
                return
            }
            #expect(request.serverAPI?.operation == .history)
            #expect(request.serverAPI?.transactionID == "2000000001")
            #expect(request.serverAPI?.environment == nil)
            #expect(request.sharedSecret == nil)
        }
        // `auto` never switches an app that has no key.
        guard case .call(let noKey, _) = planner.start(job(transactionID: "1"), app: app(backend: .auto, switched: true)) else { return }
        #expect(noKey.serverAPI == nil)
    }

    @Test("A receipt not checked at the door has no trustworthy id: dead letter; a checked one without purchases is valid and empty")
    func receiptWithoutID() {
        guard case .settle(.bury(let buried?)) = planner.start(job(), app: app(backend: .serverAPI, key: key)) else {
            Issue.record("an unchecked receipt is buried")
            return
        }
        #expect(buried.errorCode == .receiptNotVerifiedLocally)
        guard case .settle(.store(let record)) = planner.start(job(transactionID: ""), app: app(backend: .serverAPI, key: key)) else {
            Issue.record("an empty checked receipt is stored")
            return
        }
        #expect(record.status == .valid)
        #expect(record.purchases.isEmpty)
        #expect(record.validatedBy == .serverAPI)
    }

    @Test("StoreKit 2 jobs always ask the Server API, in the environment they name; without a usable key they are dead letters at once")
    func storeKit2() {
        guard
            case .call(let request, _) = planner.start(
                job(source: .signedTransaction, transactionID: "42", environment: "sandbox"), app: app(backend: .verifyReceipt, key: key))
        else {
            Issue.record("a signed transaction is a call")
            return
        }
        #expect(request.serverAPI?.environment == .sandbox)
        #expect(request.serverAPI?.key == key)
        guard case .settle(.bury(let missing?)) = planner.start(job(source: .transactionID, transactionID: "42"), app: app()) else {
            Issue.record("no key: buried")
            return
        }
        #expect(missing.errorCode == .serverAPIKeyMissing)
        #expect(missing.attempt == 1)
        var unreadable = app()
        unreadable.serverAPIKeyID = "KEY123"
        guard case .settle(.bury(let sealed?)) = planner.start(job(source: .transactionID, transactionID: "42"), app: unreadable) else { return }
        #expect(sealed.errorCode == .serverAPIKeyUnreadable)
        #expect(!(sealed.errorMessage ?? "").contains("secret\n"))
    }

    @Test("A re-poll of a Server API app asks for the subscription's statuses by its original transaction id")
    func repoll() {
        let target = RepollTarget(originalTransactionID: "1000000000000001", receiptID: UUID(), pollSequence: 2)
        guard case .call(let request, _) = planner.start(job(environment: "sandbox", target: target), app: app(backend: .serverAPI, key: key))
        else {
            Issue.record("a re-poll is a call")
            return
        }
        #expect(request.serverAPI?.operation == .statuses)
        #expect(request.serverAPI?.transactionID == "1000000000000001")
        #expect(request.serverAPI?.environment == .sandbox)
    }

    @Test("A re-poll of a StoreKit 2 subscription asks the Server API even when the app's receipts go to verifyReceipt; a receipt's re-poll does not")
    func storeKit2Repoll() throws {
        let target = RepollTarget(originalTransactionID: "1000000000000002", receiptID: UUID(), pollSequence: 1)
        for source in [JobSource.signedTransaction, .transactionID] {
            let envelope = JobEnvelope(
                id: JobID.make(), appID: UUID(), enqueuedAt: clock.now, origin: .scheduler,
                payload: .repoll(
                    RepollJob(target: target, latestReceipt: "eyJ.a.b", bundleID: "com.example.a", environment: "sandbox", source: source)))
            // The wire keeps the source: a re-poll read back from Redis asks the same API.
            let decoded = try JobEnvelope.decode(envelope.encoded())
            guard case .call(let request, _) = planner.start(decoded, app: app(backend: .verifyReceipt, key: key)) else {
                Issue.record("a re-poll is a call")
                return
            }
            #expect(request.serverAPI?.operation == .statuses, "\(source)")
            #expect(request.serverAPI?.transactionID == "1000000000000002")
            #expect(request.serverAPI?.purpose == .repoll)
        }
        guard case .call(let legacy, _) = planner.start(job(target: target), app: app(backend: .verifyReceipt, key: key)) else {
            Issue.record("a re-poll is a call")
            return
        }
        #expect(legacy.serverAPI == nil, "a receipt's subscription re-polls with verifyReceipt, as its app validates receipts")
    }

    @Test("A ledger is stored valid with its purchases and states; a 429 waits until Retry-After without spending an attempt")
    func ledgerAndRateLimit() throws {
        var rng = SeededGenerator(seed: 7)
        let state = SubscriptionState(
            originalTransactionID: "1", productID: "monthly", status: .active, expiresAt: clock.now.addingTimeInterval(30 * 86_400),
            purchasedAt: clock.now, latestTransactionID: "2", observedAt: clock.now)
        let ledger = ServerAPILedger(
            environment: "sandbox", purchases: [InAppPurchase(productID: "monthly", transactionID: "2", originalTransactionID: "1")],
            subscriptions: [state])
        let report = ValidationOutcome(ledger: ledger, calls: [])
        guard case .store(let record) = planner.plan(job(source: .transactionID, transactionID: "2"), outcome: report, using: &rng) else {
            Issue.record("a ledger is stored")
            return
        }
        #expect(record.status == .valid)
        #expect(record.environment == "sandbox")
        #expect(record.purchases.map(\.transactionID) == ["2"])
        #expect(record.subscriptions.first?.state == state)
        #expect(record.subscriptions.first?.nextPollAt != nil)
        #expect(record.validatedBy == .serverAPI)

        guard
            case .store(let rejected) = planner.plan(
                job(source: .transactionID, transactionID: "2"), outcome: report, sandboxPolicy: .reject, using: &rng)
        else { return }
        #expect(rejected.status == .invalid)
        #expect(rejected.storedErrorCode == FailureCode.sandboxRejected.rawValue)
        #expect(rejected.subscriptions.isEmpty)

        let until = clock.now.addingTimeInterval(90)
        let limited = ValidationOutcome(
            verdict: .transient,
            calls: [
                AppleCall(endpoint: .production, httpStatus: 429, appleStatus: 4_290_000, isRetryable: false, latencyMs: 3, errorCode: .rateLimited)
            ],
            failure: .rateLimited, rateLimitedUntil: until, backend: .serverAPI)
        let waiting = job(source: .transactionID, transactionID: "2")
        guard case .retry(let updated, let runAt, let outcome) = planner.plan(waiting, outcome: limited, using: &rng) else {
            Issue.record("a 429 is a wait")
            return
        }
        #expect(updated.attempt == waiting.attempt)
        #expect(updated.history.count == 1)
        #expect(runAt >= until && runAt <= until.addingTimeInterval(1))
        #expect(outcome == .deferred)
    }
}

extension JobPlanner {
    /// How the worker starts a job that asks Apple (every job these tests make does).
    fileprivate func start(_ envelope: JobEnvelope, app: AppRecord, verifyReceipt: VerifyReceiptLifecycle = VerifyReceiptLifecycle()) -> JobStart {
        guard let validation = ValidationJob(envelope.payload) else { return .settle(.bury(envelope)) }
        return start(envelope, validation, app: app, verifyReceipt: verifyReceipt)
    }
}
