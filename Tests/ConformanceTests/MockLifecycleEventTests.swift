import Foundation
import MockAppStore
import ReceiptCore
import Testing

/// The mock App Store renewing a subscription whose customer chose another product of the group
/// (a downgrade or crossgrade): the conformance suite's `downgrade` scenario.
@Suite("Mock App Store renewing into the product chosen")
struct MockRenewalProductTests {
    @Test("DID_RENEW renews into the renewal info's autoRenewProductId; without one, the same product")
    func renewsIntoChosenProduct() throws {
        let expiry = 1_799_117_196_000.0
        for chosen in ["basic", nil] {
            let state = MockBoundaryTests.mock(expiry: expiry, offset: 0)
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
}
