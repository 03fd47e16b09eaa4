import Foundation
import ReceiptCore
import Testing

/// The pure side of identity (issue 43, item 5): the app account token read from Apple's answers,
/// the transfer rule's names, and the events a transfer and a merge make.
@Suite("Identity: app account tokens, transfer rules, their events")
struct IdentityTests {
    @Test("The app account token is read from a Server API transaction and from verifyReceipt's in_app entry; anything else is none")
    func tokenRead() throws {
        let token = "7E3FB20B-4CDB-47CC-936D-99D65F608138"
        let signed = try #require(
            InAppPurchase(
                serverAPITransaction: .object([
                    "transactionId": .string("1"), "productId": .string("p"), "appAccountToken": .string(token),
                ])))
        #expect(signed.appAccountToken == UUID(uuidString: token))
        let legacy = try #require(
            InAppPurchase(
                appleJSON: .object(["transaction_id": .string("2"), "product_id": .string("p"), "app_account_token": .string(token.lowercased())])))
        #expect(legacy.appAccountToken == UUID(uuidString: token))
        let malformed = try #require(
            InAppPurchase(serverAPITransaction: .object(["transactionId": .string("3"), "productId": .string("p"), "appAccountToken": .string("x")])))
        #expect(malformed.appAccountToken == nil)
    }

    @Test("The transfer rules are the three names the admin API, the command line and the database use")
    func ruleNames() {
        #expect(TransferRule.allCases.map(\.rawValue) == ["keep_first", "transfer_to_latest", "share"])
        #expect(TransferRule(rawValue: "keep-first") == nil)
    }

    @Test("A transfer is one event for each side, filed under the subscription, each stated once")
    func transferEvents() throws {
        var purchase = InAppPurchase(productID: "com.example.yearly", transactionID: "20", originalTransactionID: "10")
        purchase.expiresDate = Date(timeIntervalSince1970: 2_000_000_000)
        let app = UUID()
        let events = [NewEvent.TransferSide.from, .to].map { side in
            NewEvent.transferred(
                purchase: purchase, environment: "sandbox", appID: app, from: "alice", to: "bob", side: side, receiptID: nil,
                occurredAt: Date(timeIntervalSince1970: 1_900_000_000), id: UUID())
        }
        #expect(events.map(\.type) == [.customerTransferred, .customerTransferred])
        #expect(events.map(\.userIdentifier) == ["alice", "bob"])
        #expect(events.allSatisfy { $0.subject == "subscription:10" })
        #expect(Set(events.compactMap(\.dedupeKey)).count == 2, "each side is its own event")
        let data = try JSONValue.parse(Array(events[0].data.utf8))
        #expect(data["side"]?.stringValue == "from")
        #expect(data["to_user_identifier"]?.stringValue == "bob")
        #expect(data["purchase"]?["transaction_id"]?.stringValue == "20")

        purchase.expiresDate = nil
        let oneTime = NewEvent.transferred(
            purchase: purchase, environment: "sandbox", appID: app, from: "alice", to: "bob", side: .to, receiptID: nil, occurredAt: Date(),
            id: UUID())
        #expect(oneTime.subject == "purchase:20")
    }

    @Test("A merge is filed under the customer and matches the customer.* filter")
    func aliasEvent() throws {
        let event = NewEvent.aliased(alias: "device-1", userIdentifier: "user-42", movedPurchases: 3, appID: UUID(), occurredAt: Date(), id: UUID())
        #expect(event.subject == "customer:user-42")
        #expect(event.userIdentifier == "user-42")
        #expect(try JSONValue.parse(Array(event.data.utf8))["moved_purchases"]?.intValue == 3)
        #expect(EventType.customerAliased.matches("customer.*") && EventType.customerTransferred.matches("customer.*"))
        #expect(EventType.isValidPattern("customer.transferred"))
    }
}
