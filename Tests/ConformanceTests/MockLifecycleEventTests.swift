import Foundation
import MockAppStore
import ReceiptCore
import Testing

/// The mock App Store's ledger and renewal info as the conformance suite's scenarios change them:
/// a downgrade's renewal, a renewal extension, a price increase, a resubscription.
@Suite("Mock App Store's lifecycle events")
struct MockLifecycleEventTests {
    static let expiry = 1_799_117_196_000.0

    /// A JWS's payload.
    static func payload(_ jws: String) throws -> JSONValue {
        let part = String(jws.split(separator: ".")[1]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        let padded = part + String(repeating: "=", count: (4 - part.count % 4) % 4)
        return try JSONDecoder().decode(JSONValue.self, from: try #require(Data(base64Encoded: padded)))
    }

    /// The renewal info of the last notification the mock signed.
    static func renewal(_ state: MockAppStoreState) throws -> JSONValue {
        let notification = try payload(try #require(state.notifications.sent.last?.signedPayload))
        return try payload(try #require(notification["data"]?["signedRenewalInfo"]?.stringValue))
    }

    @Test("DID_RENEW renews into the renewal info's autoRenewProductId; without one, the same product")
    func renewsIntoChosenProduct() throws {
        for chosen in ["basic", nil] {
            let state = MockBoundaryTests.mock(expiry: Self.expiry, offset: 0)
            if let chosen {
                state.serverAPI.setRenewal(["autoRenewProductId": .string(chosen)], originalTransactionID: "9001", environment: .sandbox)
            }
            _ = try state.notifications.event(type: "DID_RENEW", transactionID: "9001", environment: .sandbox, period: 30 * 86_400)
            let latest = try #require(state.serverAPI.latestTransaction(of: "9001", in: .sandbox))
            #expect(latest["transactionId"]?.stringValue != "9001", "a new period")
            // The boundary mock's subscription is of product `monthly`; a chosen one replaces it.
            #expect(latest["productId"]?.stringValue == (chosen ?? "monthly"))
        }
    }

    @Test("RENEWAL_EXTENDED moves the latest period's end by the days given, still active")
    func extends() throws {
        let state = MockBoundaryTests.mock(expiry: Self.expiry, offset: -86_400)
        _ = try state.notifications.event(type: "RENEWAL_EXTENDED", transactionID: "9001", environment: .sandbox, period: 10 * 86_400)
        let latest = try #require(state.serverAPI.latestTransaction(of: "9001", in: .sandbox))
        #expect(latest["expiresDate"]?.intValue == Int(Self.expiry) + 10 * 86_400_000)
        #expect(try MockBoundaryTests.status(state) == 1)
    }

    @Test("PRICE_INCREASE states the customer's consent; not consented, the expiry says why and leaves auto-renew on")
    func priceIncrease() throws {
        let state = MockBoundaryTests.mock(expiry: Self.expiry, offset: -86_400)
        _ = try state.notifications.event(type: "PRICE_INCREASE", subtype: "PENDING", transactionID: "9001", environment: .sandbox)
        #expect(try Self.renewal(state)["priceIncreaseStatus"]?.intValue == 0)
        _ = try state.notifications.event(type: "PRICE_INCREASE", subtype: "ACCEPTED", transactionID: "9001", environment: .sandbox)
        #expect(try Self.renewal(state)["priceIncreaseStatus"]?.intValue == 1)
        let declined = MockBoundaryTests.mock(expiry: Self.expiry, offset: 0)
        _ = try declined.notifications.event(type: "EXPIRED", subtype: "PRICE_INCREASE", transactionID: "9001", environment: .sandbox)
        let renewal = try Self.renewal(declined)
        #expect(renewal["expirationIntent"]?.intValue == 3)
        #expect(renewal["autoRenewStatus"]?.intValue == 1)
        #expect(try MockBoundaryTests.status(declined) == 2)
    }

    @Test("SUBSCRIBED after a voluntary expiry: auto-renew on again, no expiration intent")
    func resubscribed() throws {
        let state = MockBoundaryTests.mock(expiry: Self.expiry, offset: 0)
        _ = try state.notifications.event(type: "EXPIRED", subtype: "VOLUNTARY", transactionID: "9001", environment: .sandbox)
        #expect(try Self.renewal(state)["autoRenewStatus"]?.intValue == 0)
        _ = try state.notifications.event(type: "SUBSCRIBED", subtype: "RESUBSCRIBE", transactionID: "9001", environment: .sandbox)
        let renewal = try Self.renewal(state)
        #expect(renewal["autoRenewStatus"]?.intValue == 1)
        #expect(renewal["expirationIntent"]?.intValue == nil)
    }
}
