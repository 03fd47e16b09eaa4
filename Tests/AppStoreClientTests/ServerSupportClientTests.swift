import AppStoreClient
import DevTools
import Foundation
import MockAppStore
import OpenSSL
import ReceiptCore
import ReceiptSignature
import Synchronization
import SystemTesting
import Testing

/// The support endpoints' client against the mock's Server API over real HTTP: Apple's shapes,
/// its error codes mapped to closed failures, 429 with its millisecond `Retry-After`, the shared
/// bucket asked before each call, and every JWS checked.
@Suite("App Store Server API support client against the mock", .blockingWork, .serialized)
struct ServerSupportClientTests {
    let bundleID = "com.example.support"

    struct Fixture {
        let mock: RunningMockAppStore
        let client: ServerSupportClient
        let app: AppRecord
    }

    /// A bucket that never has a slot: the client must not call Apple.
    final class FullBucket: ServerAPIRateLimiter, @unchecked Sendable {
        let until: Date
        init(until: Date) { self.until = until }
        func reserve(
            app: String, endpoint: ServerAPIEndpoint, environment: AppStoreEnvironment, purpose: ApplePurpose, now: Date,
            bookingAhead: TimeInterval
        ) throws -> ServerAPISlot { .later(until) }
        func pause(app: String, environment: AppStoreEnvironment, until: Date, now: Date) throws {}
    }

    func fixture(throttle: ServerAPIThrottle? = nil) async throws -> Fixture {
        let mock = try await MockAppStore.start(state: MockAppStoreState())
        let signingKey = try PrivateKey.generateP256()
        let key = ServerAPIKey(issuerID: "issuer-s", keyID: "SUP\(UInt16.random(in: 0...9999))", privateKeyPEM: try signingKey.pemPKCS8())
        mock.state.serverAPI.addKey(issuerID: key.issuerID, keyID: key.keyID, bundleID: bundleID, publicKey: try signingKey.publicKey)
        let verifier = JWSVerifier(trustStore: TrustStore(roots: [mock.state.serverAPI.authority.root]))
        let client = try ServerSupportClient(
            configuration: .init(productionURL: mock.serverAPIProductionURL, sandboxURL: mock.serverAPISandboxURL, requestTimeout: .seconds(10)),
            verifyPayload: { verifier.verify($0).map(\.payload) }, throttle: throttle, maximumWait: 2)
        let app = AppRecord(id: UUID(), name: "support", bundleID: bundleID, sharedSecret: nil, serverAPIKey: key)
        return Fixture(mock: mock, client: client, app: app)
    }

    /// A monthly subscription (renewing in `days`) and a non-consumable of one customer.
    func customer(_ f: Fixture, original: String = "5000000001", days: Double = 10, refunded: Bool = false) {
        let now = (Date().timeIntervalSince1970 * 1000).rounded()
        var subscription: [String: JSONValue] = [
            "transactionId": .string(original), "originalTransactionId": .string(original), "webOrderLineItemId": .string("w\(original)"),
            "bundleId": .string(bundleID), "productId": .string("monthly"), "type": .string("Auto-Renewable Subscription"),
            "purchaseDate": .number(now - 86_400_000), "originalPurchaseDate": .number(now - 86_400_000),
            "expiresDate": .number(now + days * 86_400_000), "quantity": .number(1),
        ]
        if refunded { subscription["revocationDate"] = .number(now - 1000) }
        let other: JSONValue = .object([
            "transactionId": .string(String(Int(original)! + 1)), "originalTransactionId": .string(String(Int(original)! + 1)),
            "bundleId": .string(bundleID), "productId": .string("lifetime"), "type": .string("Non-Consumable"),
            "purchaseDate": .number(now - 3_600_000), "quantity": .number(1),
        ])
        f.mock.state.serverAPI.add(transactions: [.object(subscription), other], environment: .production)
    }

    @Test("Look Up Order ID: the customer's purchases, checked; an order Apple does not know (status 1) is orderNotFound")
    func orderLookup() async throws {
        let f = try await fixture()
        defer { Task { await f.mock.stop() } }
        customer(f)
        // The mock's order ids are its transaction ids.
        let found = try await f.client.lookUpOrder("5000000002", app: f.app, environment: .production)
        #expect(found.map(\.transactionID).sorted() == ["5000000001", "5000000002"])
        #expect(found.first { $0.productID == "monthly" }?.expiresDate != nil)
        await #expect(throws: SupportFailure.orderNotFound) { try await f.client.lookUpOrder("UNKNOWN1", app: f.app, environment: .production) }
        // Not an order id at all: refused before any call.
        await #expect(throws: SupportFailure.orderNotFound) { try await f.client.lookUpOrder("../x", app: f.app, environment: .production) }
        #expect(f.mock.state.serverAPI.calls("production lookup") == 2)
    }

    @Test("Extend a renewal date: the subscription renews later, once per request identifier; Apple's 4040005 is transactionNotFound")
    func extend() async throws {
        let f = try await fixture()
        defer { Task { await f.mock.stop() } }
        customer(f, days: 10)
        let request = try RenewalExtension(originalTransactionID: "5000000001", days: 30, reason: 1, requestIdentifier: UUID())
        let result = try await f.client.extendRenewal(request, app: f.app, environment: .production)
        #expect(result.succeeded)
        let effective = try #require(result.effectiveDate)
        #expect(effective.timeIntervalSinceNow > 39 * 86_400 && effective.timeIntervalSinceNow < 41 * 86_400)
        // The same request again changes nothing.
        let again = try await f.client.extendRenewal(request, app: f.app, environment: .production)
        #expect(again.effectiveDate == result.effectiveDate)
        let unknown = try RenewalExtension(originalTransactionID: "5999999999", days: 1, reason: 0, requestIdentifier: UUID())
        await #expect(throws: SupportFailure.transactionNotFound) { try await f.client.extendRenewal(unknown, app: f.app, environment: .production) }
    }

    @Test("Apple's 429: rateLimited until its millisecond Retry-After; a full shared bucket: no call at all")
    func rateLimits() async throws {
        let f = try await fixture()
        defer { Task { await f.mock.stop() } }
        customer(f)
        let retryAt = Int64((Date().timeIntervalSince1970 + 30) * 1000)
        f.mock.state.serverAPI.addRule(.init(pathPrefix: "/inApps/v1/transactions/", httpStatus: 429, errorCode: 4_290_000, retryAfterMs: retryAt))
        await #expect(throws: SupportFailure.rateLimited(until: Date(timeIntervalSince1970: Double(retryAt) / 1000))) {
            try await f.client.setAppAccountToken(UUID(), originalTransactionID: "5000000001", app: f.app, environment: .production)
        }
        #expect(f.mock.state.serverAPI.calls("production app_account_token") == 1)

        let until = Date().addingTimeInterval(60)
        let limited = try await fixture(throttle: ServerAPIThrottle { FullBucket(until: until) })
        defer { Task { await limited.mock.stop() } }
        await #expect(throws: SupportFailure.rateLimited(until: until)) {
            try await limited.client.requestTestNotification(app: limited.app, environment: .production)
        }
        #expect(limited.mock.state.serverAPI.calls("production all") == 0)
    }

    @Test("Set App Account Token: Apple keeps it on the purchase; an unknown transaction is transactionNotFound")
    func appAccountToken() async throws {
        let f = try await fixture()
        defer { Task { await f.mock.stop() } }
        customer(f)
        let token = UUID()
        try await f.client.setAppAccountToken(token, originalTransactionID: "5000000001", app: f.app, environment: .production)
        let found = try await f.client.lookUpOrder("5000000001", app: f.app, environment: .production)
        #expect(found.count == 2)
        await #expect(throws: SupportFailure.transactionNotFound) {
            try await f.client.setAppAccountToken(token, originalTransactionID: "5999999999", app: f.app, environment: .production)
        }
    }

    @Test("Mass extension: accepted, in progress at the first status, complete at the next; an unknown request is not found")
    func massExtension() async throws {
        let f = try await fixture()
        defer { Task { await f.mock.stop() } }
        let request = try MassRenewalExtension(productID: "monthly", days: 7, reason: 3, requestIdentifier: UUID(), storefrontCountryCodes: ["USA"])
        try await f.client.massExtend(request, app: f.app, environment: .production)
        #expect(f.mock.state.serverAPI.support.massRequests == 1)
        let first = try await f.client.massExtensionStatus(
            productID: "monthly", requestIdentifier: request.requestIdentifier, app: f.app, environment: .production)
        #expect(!first.isComplete)
        let second = try await f.client.massExtensionStatus(
            productID: "monthly", requestIdentifier: request.requestIdentifier, app: f.app, environment: .production)
        #expect(second.isComplete && second.completedAt != nil && second.failedCount == 0)
        await #expect(throws: SupportFailure.transactionNotFound) {
            try await f.client.massExtensionStatus(productID: "monthly", requestIdentifier: UUID(), app: f.app, environment: .production)
        }
    }

    @Test("Refund history: only the refunded purchases, checked; test notification: a token, then its status with the notification's UUID")
    func refundsAndTestNotification() async throws {
        let f = try await fixture()
        defer { Task { await f.mock.stop() } }
        customer(f, refunded: true)
        let refunds = try await f.client.refundHistory(of: "5000000002", app: f.app, environment: .production)
        #expect(refunds.map(\.transactionID) == ["5000000001"])
        #expect(refunds.first?.revocationDate != nil)
        let token = try await f.client.requestTestNotification(app: f.app, environment: .sandbox)
        let status = try await f.client.testNotificationStatus(token: token, app: f.app, environment: .sandbox)
        #expect(status.notificationUUID == token)
        await #expect(throws: SupportFailure.testNotificationNotFound) {
            try await f.client.testNotificationStatus(token: "no-such-token", app: f.app, environment: .sandbox)
        }
    }

    @Test("A key the mock does not know: unauthorized; an app without a key: noServerAPIKey, and no call")
    func keys() async throws {
        let f = try await fixture()
        defer { Task { await f.mock.stop() } }
        var stranger = f.app
        stranger.serverAPIKey = ServerAPIKey(issuerID: "x", keyID: "UNKNOWN", privateKeyPEM: try PrivateKey.generateP256().pemPKCS8())
        await #expect(throws: SupportFailure.unauthorized) { try await f.client.requestTestNotification(app: stranger, environment: .production) }
        var keyless = f.app
        keyless.serverAPIKey = nil
        await #expect(throws: SupportFailure.noServerAPIKey) { try await f.client.requestTestNotification(app: keyless, environment: .production) }
        #expect(f.mock.state.serverAPI.calls("production all") == 1)
    }
}
