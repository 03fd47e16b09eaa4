import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

/// Apple's decoded payload models: every documented field readable, unknown fields kept, wrong
/// types refused with `malformed_payload`.
@Suite("JWS payloads: transaction, renewal info and notification")
struct JWSPayloadTests {
    static func object(_ text: String) throws -> JSONValue { try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) }

    @Test("A transaction with every documented field, and one Apple has not documented yet")
    func transaction() throws {
        let json = try Self.object(
            """
            {"transactionId":"2000000000000002","originalTransactionId":"2000000000000001","webOrderLineItemId":"300",
             "bundleId":"com.example","productId":"pro.monthly","subscriptionGroupIdentifier":"21000000",
             "purchaseDate":1700000000000,"originalPurchaseDate":1690000000000,"expiresDate":1702592000000,"quantity":1,
             "type":"Auto-Renewable Subscription","appAccountToken":"7e3fb20b-4cdb-47cc-936d-99d65f608138",
             "inAppOwnershipType":"PURCHASED","signedDate":1700000001000,"revocationReason":1,"revocationDate":1701000000000,
             "isUpgraded":false,"offerType":1,"offerIdentifier":"intro","environment":"Sandbox","storefront":"USA",
             "storefrontId":"143441","transactionReason":"RENEWAL","currency":"USD","price":9990,"offerDiscountType":"FREE_TRIAL",
             "appTransactionId":"704","offerPeriod":"P1W","futureField":{"nested":true}}
            """)
        let payload = try JWSTransactionPayload(json: json)
        #expect(payload.transactionID == "2000000000000002")
        #expect(payload.originalTransactionID == "2000000000000001")
        #expect(payload.webOrderLineItemID == "300")
        #expect(payload.subscriptionGroupIdentifier == "21000000")
        #expect(payload.purchaseDate == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(payload.expiresDate == Date(timeIntervalSince1970: 1_702_592_000))
        #expect(payload.quantity == 1)
        #expect(payload.revocationReason == 1)
        #expect(payload.revocationDate == Date(timeIntervalSince1970: 1_701_000_000))
        #expect(payload.isUpgraded == false)
        #expect(payload.offerType == 1)
        #expect(payload.price == 9990)
        #expect(payload.offerPeriod == "P1W")
        #expect(payload.appTransactionID == "704")
        #expect(payload.json["futureField"]?["nested"] == .bool(true), "unknown fields are kept")
        #expect(JWSPayloadKind(json) == .transaction)
    }

    @Test("A renewal info with every documented field")
    func renewalInfo() throws {
        let json = try Self.object(
            """
            {"originalTransactionId":"1","expirationIntent":2,"autoRenewProductId":"pro.yearly","productId":"pro.monthly",
             "autoRenewStatus":0,"isInBillingRetryPeriod":true,"priceIncreaseStatus":1,"gracePeriodExpiresDate":1700100000000,
             "offerType":2,"offerIdentifier":"promo","signedDate":1700000000000,"environment":"Production",
             "recentSubscriptionStartDate":1690000000000,"renewalDate":1702592000000,"currency":"EUR","renewalPrice":4990,
             "offerDiscountType":"PAY_AS_YOU_GO","eligibleWinBackOfferIds":["wb1","wb2"],"appAccountToken":"x",
             "appTransactionId":"9","offerPeriod":"P1M"}
            """)
        let payload = try JWSRenewalInfoPayload(json: json)
        #expect(payload.expirationIntent == 2)
        #expect(payload.autoRenewStatus == 0)
        #expect(payload.isInBillingRetryPeriod == true)
        #expect(payload.gracePeriodExpiresDate == Date(timeIntervalSince1970: 1_700_100_000))
        #expect(payload.eligibleWinBackOfferIDs == ["wb1", "wb2"])
        #expect(payload.renewalPrice == 4990)
        #expect(JWSPayloadKind(json) == .renewalInfo)
    }

    @Test(
        "Apple's decoded notification models (app-store-server-library) read as notifications", .enabled(if: TestEnvironment.appStoreTestData != nil))
    func notificationModels() throws {
        let root = try #require(TestEnvironment.appStoreTestData)
        let signed = try JWSNotificationPayload(
            json: try JSONDecoder().decode(
                JSONValue.self, from: Data(contentsOf: root.appendingPathComponent("notifications/applelib-decoded-signedNotification-model.json"))))
        #expect(signed.notificationType == "SUBSCRIBED")
        #expect(signed.subtype == "INITIAL_BUY")
        #expect(signed.appAppleID == 41234)
        #expect(signed.bundleID == "com.example")
        #expect(signed.signedTransactionInfo == "signed_transaction_info_value")
        #expect(signed.status == 1)
        #expect(signed.signedDate == Date(timeIntervalSince1970: 1_698_148_900))
        let summary = try JWSNotificationPayload(
            json: try JSONDecoder().decode(
                JSONValue.self,
                from: Data(contentsOf: root.appendingPathComponent("notifications/applelib-decoded-signedSummaryNotification-model.json"))))
        #expect(summary.summary != nil)
        #expect(summary.bundleID != nil)
    }

    @Test(
        "Missing required fields and documented fields of the wrong type are malformed_payload",
        arguments: [
            #"{"originalTransactionId":"1","productId":"p","bundleId":"b","purchaseDate":1}"#,
            #"{"transactionId":1,"originalTransactionId":"1","productId":"p","bundleId":"b","purchaseDate":1}"#,
            #"{"transactionId":"1","originalTransactionId":"1","productId":"p","bundleId":"b","purchaseDate":"yesterday"}"#,
            #"{"transactionId":"1","originalTransactionId":"1","productId":"p","bundleId":"b","purchaseDate":1.5}"#,
            #"{"transactionId":"1","originalTransactionId":"1","productId":"p","bundleId":"b","purchaseDate":1,"quantity":"1"}"#,
            #"{"transactionId":"1","originalTransactionId":"1","productId":"p","bundleId":"b","purchaseDate":1,"isUpgraded":1}"#,
            #"{"transactionId":"1","originalTransactionId":"1","productId":"p","bundleId":"b","purchaseDate":1e300}"#,
        ])
    func malformedTransaction(text: String) throws {
        let json = try Self.object(text)
        #expect(throws: JWSFailure.malformedPayload) { try JWSTransactionPayload(json: json) }
    }

    @Test("A notification without its type or with data of the wrong shape is malformed_payload")
    func malformedNotification() throws {
        for text in [#"{"notificationUUID":"u"}"#, #"{"notificationType":"TEST","notificationUUID":"u","data":{"status":"1"}}"#] {
            let json = try Self.object(text)
            #expect(throws: JWSFailure.malformedPayload) { try JWSNotificationPayload(json: json) }
        }
        #expect(throws: JWSFailure.malformedPayload) { try JWSRenewalInfoPayload(json: .object([:])) }
    }
}
