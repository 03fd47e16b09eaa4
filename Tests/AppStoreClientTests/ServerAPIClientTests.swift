import AppStoreClient
import DevTools
import Foundation
import MockAppStore
import OpenSSL
import ReceiptCore
import ReceiptSignature
import ReceiptTesting
import SystemTesting
import Testing

/// The Server API client against the mock's Server API over real HTTP: JWTs, pages, environments,
/// Apple's error codes, 429, and JWS checked on every answer.
@Suite("App Store Server API client against the mock", .blockingWork, .serialized)
struct ServerAPIClientTests {
    let bundleID = "com.example.serverapi"

    struct Fixture {
        let mock: RunningMockAppStore
        let client: ServerAPIClient
        let key: ServerAPIKey

        /// Ends the client's engine thread (and its run()), then the mock.
        func stop() async {
            client.shutdown()
            await mock.stop()
        }
    }

    /// - Parameters:
    ///   - appleNow: the mock's clock (what its answers are signed at).
    ///   - observedAt: the client's clock for dating answers.
    func fixture(
        trusting roots: [Certificate]? = nil, registerKey: Bool = true, appleNow: @escaping @Sendable () -> Date = { Date() },
        observedAt: @escaping @Sendable () -> Date = { Date() }
    ) async throws -> Fixture {
        let mock = try await MockAppStore.start(state: MockAppStoreState(now: appleNow))
        let signingKey = try PrivateKey.generateP256()
        let key = ServerAPIKey(issuerID: "issuer-1", keyID: "KEY\(UInt16.random(in: 0...9999))", privateKeyPEM: try signingKey.pemPKCS8())
        if registerKey {
            mock.state.serverAPI.addKey(issuerID: key.issuerID, keyID: key.keyID, bundleID: bundleID, publicKey: try signingKey.publicKey)
        }
        let verifier = JWSVerifier(trustStore: TrustStore(roots: roots ?? [mock.state.serverAPI.authority.root]))
        let tokens = ServerAPITokenIssuer()
        let client = ServerAPIClient(
            configuration: .init(productionURL: mock.serverAPIProductionURL, sandboxURL: mock.serverAPISandboxURL, requestTimeout: .seconds(10)),
            tokens: { try tokens.token(for: $0.key, bundleID: $0.bundleID) },
            verifyPayload: { jws in verifier.verify(jws).map(\.payload) }, observedAt: observedAt)
        // The engine's thread starts in run(), as the worker's service group calls it.
        Task { try await client.run() }
        return Fixture(mock: mock, client: client, key: key)
    }

    func transactions(_ count: Int, start: Int = 3_000_000_000, subscription: Bool = false) -> [JSONValue] {
        let now = (Date().timeIntervalSince1970 * 1000).rounded()
        return (0..<count).map { index in
            var object: [String: JSONValue] = [
                "transactionId": .string(String(start + index)), "originalTransactionId": .string(String(subscription ? start : start + index)),
                "bundleId": .string(bundleID), "productId": .string(subscription ? "monthly" : "coins"), "quantity": .number(1),
                "purchaseDate": .number(now - Double(count - index) * 60_000), "originalPurchaseDate": .number(now - Double(count) * 60_000),
                "type": .string(subscription ? "Auto-Renewable Subscription" : "Consumable"),
            ]
            if subscription { object["expiresDate"] = .number(now + Double(index - count + 1) * 60_000 + 86_400_000) }
            return .object(object)
        }
    }

    func query(_ fixture: Fixture, _ id: String, operation: ServerAPIQuery.Operation = .history) -> ServerAPIQuery {
        ServerAPIQuery(operation: operation, transactionID: id, bundleID: bundleID, key: fixture.key, purpose: .validation)
    }

    @Test("History of 500 transactions: every page followed once, every transaction once, with a valid JWT on each call")
    func pagination() async throws {
        let f = try await fixture()
        defer { Task { await f.stop() } }
        f.mock.state.serverAPI.add(transactions: transactions(500), environment: .production)
        let report = await verify(f, query(f, "3000000250"))
        #expect(report.verdict == .valid)
        let ledger = report
        #expect(ledger.environment == "production")
        #expect(ledger.purchases.count == 500)
        #expect(Set(ledger.purchases.map(\.transactionID)).count == 500)
        #expect(ledger.subscriptions.isEmpty)
        #expect(f.mock.state.serverAPI.calls("production history") == 25)
        #expect(report.calls.count == 25)
        #expect(report.calls.allSatisfy { $0.httpStatus == 200 && $0.errorCode == nil })
    }

    @Test("A sandbox transaction: 4040010 at production, then the sandbox; unknown in both is invalid")
    func environments() async throws {
        let f = try await fixture()
        defer { Task { await f.stop() } }
        f.mock.state.serverAPI.add(transactions: transactions(3, subscription: true), environment: .sandbox)
        let report = await verify(f, query(f, "3000000001"))
        #expect(report.verdict == .valid)
        #expect(report.environment == "sandbox")
        #expect(report.calls.map(\.endpoint) == [.production, .sandbox, .sandbox])
        #expect(report.calls.first?.appleStatus == 4_040_010)
        let state = try #require(report.subscriptions.first)
        #expect(state.status == .active)
        #expect(state.latestTransactionID == "3000000002")
        let unknown = await verify(f, query(f, "3999999999"))
        #expect(unknown.verdict == .invalid)
        #expect(unknown.failure == .apple(4_040_010))
        #expect(unknown.calls.count == 2)
    }

    @Test("An app with no live release: production 401, the sandbox answers; a key the mock does not know: 401 twice, a configuration error")
    func unauthorized() async throws {
        let f = try await fixture()
        defer { Task { await f.stop() } }
        f.mock.state.serverAPI.add(transactions: transactions(1), environment: .sandbox)
        f.mock.state.serverAPI.setUnreleased(true, bundleID: bundleID)
        let report = await verify(f, query(f, "3000000000"))
        #expect(report.verdict == .valid)
        #expect(report.calls.map(\.httpStatus) == [401, 200])
        let stranger = try await fixture(registerKey: false)
        defer { Task { await stranger.stop() } }
        stranger.mock.state.serverAPI.add(transactions: transactions(1), environment: .production)
        let refused = await verify(stranger, query(stranger, "3000000000"))
        #expect(refused.verdict == .configurationError)
        #expect(refused.failure == .serverAPIUnauthorized)
        #expect(refused.calls.map(\.httpStatus) == [401, 401])
    }

    @Test("Apple's retryable codes are transient, a 429 carries Retry-After in milliseconds, a 5xx page is an outage")
    func failures() async throws {
        let f = try await fixture()
        defer { Task { await f.stop() } }
        f.mock.state.serverAPI.add(transactions: transactions(1), environment: .production)
        f.mock.state.serverAPI.addRule(.init(httpStatus: 500, errorCode: 5_000_001))
        let retryable = await verify(f, query(f, "3000000000"))
        #expect(retryable.verdict == .transient)
        #expect(retryable.failure == .apple(5_000_001))
        #expect(retryable.calls.first?.isRetryable == true)
        let until = Int64((Date().timeIntervalSince1970 + 42) * 1000)
        f.mock.state.serverAPI.addRule(.init(httpStatus: 429, errorCode: 4_290_000, retryAfterMs: until))
        let limited = await verify(f, query(f, "3000000000"))
        #expect(limited.failure == .rateLimited)
        #expect(limited.rateLimitedUntil == Date(timeIntervalSince1970: Double(until) / 1000))
        f.mock.state.serverAPI.addRule(.init(httpStatus: 503))
        let outage = await verify(f, query(f, "3000000000"))
        #expect(outage.verdict == .outage)
        #expect(await verify(f, query(f, "3000000000")).verdict == .valid)
    }

    @Test("Answers signed by a chain the deployment does not trust are refused, not stored")
    func untrustedAnswers() async throws {
        let f = try await fixture(trusting: [try MockAppleJWSAuthority.generate().root])
        defer { Task { await f.stop() } }
        f.mock.state.serverAPI.add(transactions: transactions(2), environment: .production)
        let report = await verify(f, query(f, "3000000000"))
        #expect(report.verdict == .configurationError)
        #expect(report.failure == .responseRejected(.untrustedChain))
        #expect(report.purchases.isEmpty && report.subscriptions.isEmpty && report.environment == nil)
    }

    @Test("Statuses 1–5 and renewal info from Get All Subscription Statuses")
    func statuses() async throws {
        let f = try await fixture()
        defer { Task { await f.stop() } }
        let now = (Date().timeIntervalSince1970 * 1000).rounded()
        func subscription(_ id: Int, expires: Double, extra: [String: JSONValue] = [:]) -> JSONValue {
            .object(
                [
                    "transactionId": .string(String(id)), "originalTransactionId": .string(String(id)), "bundleId": .string(bundleID),
                    "productId": .string("p\(id)"), "purchaseDate": .number(now - 86_400_000), "expiresDate": .number(expires),
                    "type": .string("Auto-Renewable Subscription"), "subscriptionGroupIdentifier": .string("g\(id)"),
                ].merging(extra) { _, new in new })
        }
        f.mock.state.serverAPI.add(
            transactions: [
                subscription(1, expires: now + 86_400_000), subscription(2, expires: now - 1000), subscription(3, expires: now - 1000),
                subscription(4, expires: now - 1000), subscription(5, expires: now + 86_400_000, extra: ["revocationDate": .number(now - 500)]),
            ], environment: .production)
        f.mock.state.serverAPI.setRenewal(["isInBillingRetryPeriod": .bool(true)], originalTransactionID: "3", environment: .production)
        f.mock.state.serverAPI.setRenewal(
            ["isInBillingRetryPeriod": .bool(true), "gracePeriodExpiresDate": .number(now + 3_600_000)], originalTransactionID: "4",
            environment: .production)
        let report = await verify(f, query(f, "1", operation: .statuses))
        let states = Dictionary(uniqueKeysWithValues: report.subscriptions.map { ($0.originalTransactionID, $0.status) })
        #expect(states == ["1": .active, "2": .expired, "3": .billingRetry, "4": .grace, "5": .revoked])
        #expect(report.calls.count == 1)
    }

    /// A poll that read the period's end at the renewal's instant, decoded after Apple signed the
    /// renewal's notification, must not date its state later than that notification: the
    /// subscription row keeps the later `observed_at` (a conformance run once answered `[]` for a
    /// renewed month so).
    @Test("Subscription states are dated by when Apple signed the answer, not by when the client decoded it")
    func datedBySignedDate() async throws {
        let signing = Date(timeIntervalSince1970: 1_800_000_000.123)
        let f = try await fixture(appleNow: { signing }, observedAt: { signing.addingTimeInterval(5) })
        defer { Task { await f.stop() } }
        let ms = (signing.timeIntervalSince1970 * 1000).rounded()
        f.mock.state.serverAPI.add(
            transactions: [
                .object([
                    "transactionId": .string("7"), "originalTransactionId": .string("7"), "bundleId": .string(bundleID),
                    "productId": .string("monthly"), "purchaseDate": .number(ms - 86_400_000), "expiresDate": .number(ms),
                    "type": .string("Auto-Renewable Subscription"), "subscriptionGroupIdentifier": .string("g7"),
                ])
            ], environment: .production)
        let report = await verify(f, query(f, "7", operation: .statuses))
        let state = try #require(report.subscriptions.first, "\(String(describing: report.failure))")
        #expect(state.observedAt == signing, "dated \(state.observedAt), signed \(signing)")
        #expect(state.status == .expired)
    }

    @Test("Incremental history: a read ends with its revision, the next read sends it and decodes only the new transactions")
    func incrementalHistory() async throws {
        let f = try await fixture()
        defer { Task { await f.stop() } }
        let customer = transactions(25, start: 3_100_000_000)
        f.mock.state.serverAPI.add(transactions: customer, environment: .production)
        var first = query(f, "3100000000")
        first.historyKey = "3100000000"
        let full = await verify(f, first)
        #expect(full.verdict == .valid)
        #expect(full.purchases.count == 25)
        #expect(f.mock.state.serverAPI.calls("production history from 0") == 1)
        let cursor = try #require(full.historyCursor)
        #expect(cursor == HistoryCursor(originalTransactionID: "3100000000", environment: .production, revision: "25"))

        // Three new transactions of the same customer: the next read starts at the stored revision.
        let added = transactions(3, start: 3_100_000_100).map { transaction -> JSONValue in
            var object = transaction.objectValue ?? [:]
            object["originalTransactionId"] = .string("3100000000")
            return .object(object)
        }
        f.mock.state.serverAPI.add(transactions: added, environment: .production)
        var next = query(f, "3100000000")
        next.historyCursor = cursor
        next.historyKey = "3100000000"
        let incremental = await verify(f, next)
        #expect(incremental.verdict == .valid)
        #expect(f.mock.state.serverAPI.calls("production history from 25") == 1)
        #expect(incremental.calls.count == 1)
        #expect(Set(incremental.purchases.map(\.transactionID)) == ["3100000100", "3100000101", "3100000102"])
        #expect(incremental.historyCursor?.revision == "28")
        // A cursor of the other environment means nothing here: the read starts from the first page.
        var stale = query(f, "3100000000")
        stale.historyCursor = HistoryCursor(originalTransactionID: "3100000000", environment: .sandbox, revision: "20")
        #expect(await verify(f, stale).purchases.count == 28)
        #expect(f.mock.state.serverAPI.calls("production history from 0") == 2)
    }

    @Test("Get Transaction Info: one call for a one-time purchase; a subscription's answer is followed by its statuses")
    func transactionInfo() async throws {
        let f = try await fixture()
        defer { Task { await f.stop() } }
        f.mock.state.serverAPI.add(transactions: transactions(1, start: 3_200_000_000), environment: .production)
        let one = await verify(f, query(f, "3200000000", operation: .transactionInfo))
        #expect(one.verdict == .valid)
        #expect(one.calls.count == 1)
        #expect(one.purchases.map(\.transactionID) == ["3200000000"])
        #expect(one.historyCursor == nil)
        #expect(f.mock.state.serverAPI.calls("production info") == 1)
        f.mock.state.serverAPI.add(transactions: transactions(2, start: 3_300_000_000, subscription: true), environment: .production)
        let subscription = await verify(f, query(f, "3300000001", operation: .transactionInfo))
        #expect(subscription.verdict == .valid)
        #expect(subscription.calls.count == 2)
        #expect(subscription.subscriptions.first?.originalTransactionID == "3300000000")
        #expect(f.mock.state.serverAPI.calls("production statuses") == 1)
    }

    func verify(_ fixture: Fixture, _ query: ServerAPIQuery) async -> ValidationOutcome {
        await withCheckedContinuation { continuation in fixture.client.verify(query) { continuation.resume(returning: $0) } }
    }
}
