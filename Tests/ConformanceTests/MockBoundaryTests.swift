import Foundation
import MockAppStore
import ReceiptCore
import Synchronization
import Testing

/// The mock App Store at the very instant a period ends, as the conformance driver plays it (its
/// clock jumps to the expiry, then runs on): the suite's "grace read as billing retry" and
/// "expired missing" were the mock calling the subscription active there.
@Suite("Mock App Store at a period's end")
struct MockBoundaryTests {
    /// A subscription whose period ends at `expiry` (whole milliseconds, as the mock signs them),
    /// and a mock whose clock stands `offset` seconds from it.
    static func mock(expiry: Double, offset: Double) -> MockAppStoreState {
        let state = MockAppStoreState(now: { Date(timeIntervalSince1970: expiry / 1000 + offset) })
        state.serverAPI.add(
            transactions: [
                .object([
                    "transactionId": .string("9001"), "originalTransactionId": .string("9001"), "productId": .string("monthly"),
                    "bundleId": .string("com.example.boundary"), "purchaseDate": .number(expiry - 2_592_000_000),
                    "originalPurchaseDate": .number(expiry - 2_592_000_000), "expiresDate": .number(expiry),
                    "type": .string("Auto-Renewable Subscription"), "environment": .string("Sandbox"),
                ])
            ], environment: .sandbox)
        return state
    }

    /// `data.status` of the last notification the mock signed.
    static func status(_ state: MockAppStoreState) throws -> Int? {
        let payload = try MockLifecycleEventTests.payload(try #require(state.notifications.sent.last?.signedPayload))
        return payload["data"]?["status"]?.intValue
    }

    @Test("A renewal failing, or a voluntary expiry, at the instant the period ends: grace (4) and expired (2), never active")
    func atTheInstant() throws {
        let expiry = 1_799_117_196_457.0
        // 0.3 ms before the rounded expiry: the same millisecond once rounded, as every date it signs.
        for (type, subtype, expected) in [("DID_FAIL_TO_RENEW", "GRACE_PERIOD", 4), ("DID_FAIL_TO_RENEW", nil, 3), ("EXPIRED", "VOLUNTARY", 2)] {
            let state = Self.mock(expiry: expiry, offset: -0.000_3)
            _ = try state.notifications.event(type: type, subtype: subtype, transactionID: "9001", environment: .sandbox)
            #expect(try Self.status(state) == expected, "\(type) \(subtype ?? "")")
        }
        // A moment before the end it is still active.
        let before = Self.mock(expiry: expiry, offset: -2)
        _ = try before.notifications.event(
            type: "DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", transactionID: "9001", environment: .sandbox)
        #expect(try Self.status(before) == 1)
    }
}
