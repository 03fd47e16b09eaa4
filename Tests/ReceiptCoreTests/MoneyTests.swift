import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

/// Money as integers: Apple's price and offer of a signed transaction and of a verifyReceipt
/// answer read into the domain, and the arithmetic of partial refunds.
@Suite("Money: prices, offers and partial refunds")
struct MoneyTests {
    static func object(_ text: String) throws -> JSONValue { try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) }

    static let usd = CurrencyCode(rawValue: "USD")!

    @Test("Currency codes are three capital letters; an amount prints by integer arithmetic")
    func currencyAndText() {
        #expect(CurrencyCode(rawValue: "EUR") != nil)
        for bad in ["usd", "US", "USDX", "", "U$D", "ÜSD"] { #expect(CurrencyCode(rawValue: bad) == nil, "\(bad)") }
        #expect(Money(milli: 9990, currency: Self.usd).decimalText == "9.99")
        #expect(Money(milli: 1500, currency: Self.usd).decimalText == "1.50")
        #expect(Money(milli: 1234, currency: Self.usd).decimalText == "1.234")
        #expect(Money(milli: 0, currency: Self.usd).decimalText == "0.00")
        #expect(Money(milli: -3330, currency: Self.usd).decimalText == "-3.33")
        #expect(Money(milli: Int64.max, currency: Self.usd).decimalText == "9223372036854775.807")
        // Both or nothing: a price without a valid currency is no price.
        #expect(Money(milli: 9990, currency: "usd") == nil)
        #expect(Money(milli: nil, currency: "USD") == nil)
    }

    @Test("Apple's offer types by number; undocumented numbers are none")
    func offerTypes() {
        #expect(OfferType.allCases.map(\.appleCode) == [1, 2, 3, 4])
        #expect(OfferType(appleCode: 3) == .offerCode)
        #expect(OfferType(appleCode: 0) == nil && OfferType(appleCode: 5) == nil)
    }

    @Test("Prorated shares round to the nearest integer, halves up, clamped to the whole")
    func proration() {
        let third = RefundProration(percentageMilli: 33_333)
        #expect(third.units(of: 3) == 1)  // 0.99999
        #expect(third.amount(of: 9990) == 3330)  // 3329.967
        #expect(third.amount(of: 29_970) == 9990)  // 9989.9001
        let half = RefundProration(percentageMilli: 50_000)
        #expect(half.units(of: 3) == 2)  // 1.5 rounds up
        #expect(half.amount(of: 1) == 1)  // 0.5 rounds up
        #expect(half.amount(of: -1) == -1)
        #expect(RefundProration(percentageMilli: 1).amount(of: 49_999) == 0)  // 0.49999
        #expect(RefundProration(percentageMilli: 1).amount(of: 50_000) == 1)  // 0.5
        #expect(RefundProration(percentageMilli: 250_000).percentageMilli == 100_000)
        #expect(RefundProration(percentageMilli: -5).units(of: 10) == 0)
        // No overflow at the extremes of Int64.
        #expect(RefundProration(percentageMilli: 100_000).amount(of: .max) == .max)
        #expect(RefundProration(percentageMilli: 50_000).amount(of: .max) == Int64.max / 2 + 1)
    }

    @Test("A revocation by kind: a full refund takes everything, a prorated one its share, a family revoke no money")
    func revocations() {
        let price = Money(milli: 29_970, currency: Self.usd)
        let full = PurchaseRevocation(kind: .refundFull, percentageMilli: nil, quantity: 3, price: price)
        #expect(full == PurchaseRevocation(kind: .refundFull, percentageMilli: 100_000, quantity: 3, amountMilli: 29_970))
        #expect(full.revokesPurchase)
        let prorated = PurchaseRevocation(kind: .refundProrated, percentageMilli: 33_333, quantity: 3, price: price)
        #expect(prorated == PurchaseRevocation(kind: .refundProrated, percentageMilli: 33_333, quantity: 1, amountMilli: 9990))
        #expect(!prorated.revokesPurchase)
        let family = PurchaseRevocation(kind: .familyRevoke, percentageMilli: nil, quantity: 1, price: price)
        #expect(family.quantity == nil && family.amountMilli == nil && family.revokesPurchase)
        // Before Apple said the kind (and verifyReceipt): a whole revocation.
        let unknown = PurchaseRevocation(kind: nil, percentageMilli: nil, quantity: 2, price: nil)
        #expect(unknown.revokesPurchase && unknown.quantity == 2 && unknown.amountMilli == nil)
        // Beyond Apple's range: the nearer bound.
        #expect(PurchaseRevocation(kind: .refundProrated, percentageMilli: 120_000, quantity: 3, price: price).quantity == 3)
    }

    @Test("A signed transaction's money, offer and ownership read into the purchase; Apple's JWS type checks cover them")
    func signedTransaction() throws {
        let json = try Self.object(
            """
            {"transactionId":"2000000000000002","originalTransactionId":"2000000000000001","bundleId":"com.example",
             "productId":"pro.monthly","purchaseDate":1700000000000,"expiresDate":1702592000000,"quantity":1,
             "inAppOwnershipType":"PURCHASED","offerType":3,"offerIdentifier":"SPRING","offerDiscountType":"PAY_AS_YOU_GO",
             "offerPeriod":"P3M","storefront":"FRA","currency":"EUR","price":4990,"billingPlanType":"MONTHLY"}
            """)
        let payload = try JWSTransactionPayload(json: json)
        #expect(payload.billingPlanType == "MONTHLY" && payload.price == 4990)
        let purchase = try #require(InAppPurchase(serverAPITransaction: json))
        #expect(purchase.price == Money(milli: 4990, currency: CurrencyCode(rawValue: "EUR")!))
        #expect(purchase.storefront == "FRA" && purchase.billingPlanType == "MONTHLY" && purchase.ownershipType == "PURCHASED")
        #expect(purchase.offer == PurchaseOffer(type: .offerCode, identifier: "SPRING", discountType: "PAY_AS_YOU_GO", period: "P3M"))
        #expect(purchase.revocation == nil && purchase.remainingQuantity == 1)
        // The API form: an integer in milli-units beside its currency, never a float.
        let resource = InAppPurchaseResource(purchase)
        #expect(resource.priceMilli == 4990 && resource.currency == "EUR" && resource.offerType == "offer_code")
        let text = String(decoding: try JSONEncoder().encode(resource), as: UTF8.self)
        #expect(text.contains("\"price_milli\":4990"))
        // A price that is not an integer is a malformed payload, as for any documented field.
        var object = try #require(json.objectValue)
        object["price"] = .number(9.99)
        #expect(throws: JWSFailure.malformedPayload) { try JWSTransactionPayload(json: .object(object)) }
        object["price"] = .number(9990)
        object["billingPlanType"] = .number(1)
        #expect(throws: JWSFailure.malformedPayload) { try JWSTransactionPayload(json: .object(object)) }
    }

    @Test("Refunds as Apple signs them: a full refund revokes, a prorated one keeps the purchase with its remaining units")
    func signedRefunds() throws {
        func purchase(_ revocation: String) throws -> InAppPurchase {
            try #require(
                InAppPurchase(
                    serverAPITransaction: try Self.object(
                        """
                        {"transactionId":"7","originalTransactionId":"7","bundleId":"com.example","productId":"coins",
                         "purchaseDate":1700000000000,"quantity":3,"type":"Consumable","currency":"USD","price":29970,
                         "revocationDate":1700100000000,"revocationReason":1,\(revocation)}
                        """)))
        }
        let prorated = try purchase(#""revocationType":"REFUND_PRORATED","revocationPercentage":33333"#)
        #expect(prorated.cancellationDate == nil && prorated.cancellationReason == nil)
        #expect(prorated.revocation == PurchaseRevocation(kind: .refundProrated, percentageMilli: 33_333, quantity: 1, amountMilli: 9990))
        #expect(prorated.remainingQuantity == 2)
        let full = try purchase(#""revocationType":"REFUND_FULL","revocationPercentage":100000"#)
        #expect(full.cancellationDate != nil && full.cancellationReason == 1 && full.remainingQuantity == 0)
        #expect(full.revocation?.amountMilli == 29_970 && full.revocation?.quantity == 3)
        let family = try purchase(#""revocationType":"FAMILY_REVOKE","inAppOwnershipType":"FAMILY_SHARED""#)
        #expect(family.cancellationDate != nil && family.revocation?.kind == .familyRevoke && family.revocation?.amountMilli == nil)
        // Older transactions say no kind: revoked as a whole, as before.
        let old = try purchase(#""storefront":"USA""#)
        #expect(old.cancellationDate != nil && old.revocation?.kind == nil && old.revocation?.amountMilli == 29_970)
    }

    @Test("A prorated REFUND notification of a subscription leaves it standing; a full one revokes it")
    func proratedNotification() throws {
        let signed = Date(timeIntervalSince1970: 1_700_100_000)
        let transaction = try Self.object(
            """
            {"transactionId":"8","originalTransactionId":"8","bundleId":"com.example","productId":"pro.monthly",
             "purchaseDate":1700000000000,"expiresDate":1800000000000,"quantity":1,"currency":"USD","price":9990,
             "revocationDate":1700100000000,"revocationReason":1,"revocationType":"REFUND_PRORATED","revocationPercentage":50000}
            """)
        let purchase = try #require(InAppPurchase(serverAPITransaction: transaction))
        let notification = AppleNotification(
            version: .v2, uuid: "n", type: "REFUND", signedDate: signed, environment: "sandbox", transaction: transaction)
        #expect(purchase.cancellationDate == nil)
        #expect(notification.effect.subscriptions.first?.status == .active)
        #expect(notification.effect.purchases.first?.revocation?.amountMilli == 4995)
    }

    @Test(
        "Real verifyReceipt answers: ownership and offers read, no price (verifyReceipt has none)",
        .enabled(if: TestEnvironment.appStoreTestData != nil))
    func verifyReceiptOffers() throws {
        let root = try #require(TestEnvironment.appStoreTestData)
        let json = try JSONDecoder().decode(
            JSONValue.self, from: Data(contentsOf: root.appendingPathComponent("responses/imdhemy-verify_receipt_response.json")))
        let purchases = VerifyReceiptResponse(json: json).purchases.map(\.purchase)
        #expect(!purchases.isEmpty)
        #expect(purchases.allSatisfy { $0.price == nil })
        #expect(purchases.contains { $0.ownershipType == "PURCHASED" })
        // Each transaction in an introductory period reads as an introductory offer.
        for purchase in purchases {
            #expect((purchase.statedOffer?.type == .introductory) == (purchase.isInIntroOfferPeriod || purchase.isTrialPeriod))
        }
        // The fields verifyReceipt names, when a transaction carries them.
        let code = try #require(InAppPurchase(appleJSON: try Self.object(#"{"transaction_id":"1","product_id":"p","offer_code_ref_name":"WINTER"}"#)))
        #expect(code.offer == PurchaseOffer(type: .offerCode, identifier: "WINTER"))
        let promo = try #require(InAppPurchase(appleJSON: try Self.object(#"{"transaction_id":"1","product_id":"p","promotional_offer_id":"P1"}"#)))
        #expect(promo.statedOffer == PurchaseOffer(type: .promotional, identifier: "P1") && promo.promotionalOfferID == "P1")
        // Round trip through the mock's verifyReceipt shape.
        #expect(InAppPurchase(appleJSON: code.appleJSON) == code)
        #expect(InAppPurchase(appleJSON: promo.appleJSON) == promo)
    }

    @Test(
        "A real signed transaction of Apple's (2023, before prices were signed): storefront and ownership read, no price invented",
        .enabled(if: TestEnvironment.appStoreTestData != nil))
    func realSignedTransaction() throws {
        let root = try #require(TestEnvironment.appStoreTestData)
        let body = try JSONDecoder().decode(
            JSONValue.self, from: Data(contentsOf: root.appendingPathComponent("notifications/gopay-v2-consumption_request-production.json")))
        let notification = try JSONValue.parse(try CompactJWS(try #require(body["signedPayload"]?.stringValue)).payload)
        let nested = try #require(notification["data"]?["signedTransactionInfo"]?.stringValue)
        let transaction = try JSONValue.parse(try CompactJWS(nested).payload)
        _ = try JWSTransactionPayload(json: transaction)
        let purchase = try #require(InAppPurchase(serverAPITransaction: transaction))
        #expect(purchase.storefront == "CHN" && purchase.ownershipType == "PURCHASED")
        #expect(purchase.price == nil && purchase.offer == nil && purchase.revocation == nil && purchase.remainingQuantity == 1)
        #expect(InAppPurchaseResource(purchase).priceMilli == nil)
    }
}
