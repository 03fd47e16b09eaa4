import Foundation
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// A customer with records of most kinds, for the export and erasure tests: a receipt under an old
/// id, a StoreKit 2 subscription under the new one, the two merged, a grant of `pro`; and another
/// user's receipt, which neither test may touch.
struct MergedCustomer {
    /// The canonical id, its alias, and the other user.
    let user: String
    let alias: String
    let other: String
    /// The alias's receipt (its text, then its id) and the other user's receipt's id.
    let receipt: String
    let receiptID: String
    let otherID: String

    /// Posts the records through the client API and the admin API, and waits for them to be stored.
    static func make(_ system: TestSystem, prefix: String, reason: String) async throws -> MergedCustomer {
        let admin = AdminAPITests()
        let app = system.app.id.canonical
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let (user, alias, other) = ("\(prefix)-\(suffix)", "\(prefix)-old-\(suffix)", "\(prefix)-other-\(suffix)")
        let (receipt, _) = try system.forgeReceipt()
        let (_, first) = try await system.post(#"{"receipt":"\#(receipt)","user_identifier":"\#(alias)"}"#)
        let receiptID = try #require(first?["id"]?.stringValue)
        let transaction = try system.signedTransaction()
        #expect(
            [200, 206].contains(
                try await system.post(
                    #"{"signed_transaction":"\#(transaction.jws)","user_identifier":"\#(user)"}"#, path: "/client/transactions"
                ).0))
        let (otherReceipt, _) = try system.forgeReceipt()
        let (_, third) = try await system.post(#"{"receipt":"\#(otherReceipt)","user_identifier":"\#(other)"}"#)
        let otherID = try #require(third?["id"]?.stringValue)
        let stored = try await eventually(timeout: .seconds(30)) {
            let (_, subscriptions) = try await system.get(path: "/client/subscriptions?user_identifier=\(user)")
            let mine = try await system.get(receiptID).1?["validation_status"]?.stringValue
            let theirs = try await system.get(otherID).1?["validation_status"]?.stringValue
            return mine == "valid" && theirs == "valid" && subscriptions?["subscriptions"]?.arrayValue?.isEmpty == false
        }
        #expect(stored)
        #expect(try await system.post(#"{"alias":"\#(alias)"}"#, path: "/client/users/\(user)/aliases").0 == 201)
        #expect(
            try await admin.send(system, "PUT", "/admin/api/apps/\(app)/entitlements/pro", body: #"{"products":["com.example.yearly"]}"#).status
                == 200)
        #expect(
            try await admin.send(system, "POST", "/admin/api/customers/\(app)/\(user)/grants", body: #"{"entitlement":"pro","reason":"\#(reason)"}"#)
                .status == 201)
        return MergedCustomer(user: user, alias: alias, other: other, receipt: receipt, receiptID: receiptID, otherID: otherID)
    }
}
