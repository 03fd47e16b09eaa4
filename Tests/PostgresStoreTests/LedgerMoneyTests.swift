import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The ledger's money and refund columns (migration 0026) through the worker's batched store: a
/// signed transaction's price survives a later source without one, and a prorated refund is one
/// `purchase.refunded` event with its amounts, however often it is replayed.
@Suite("Postgres ledger: prices and partial refunds", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct LedgerMoneyTests {
    let connection: PostgresConnection
    let app: AppRecord

    init() throws {
        (_, connection, app) = try TestSystem.newApp(named: "ledger-money", bundleID: "com.example.ledgermoney")
    }

    static let usd = CurrencyCode(rawValue: "USD")!

    func record(_ purchase: InAppPurchase, user: String = "money-user") -> ValidationRecord {
        let envelope = JobEnvelope(
            id: JobID.make(), appID: app.id, enqueuedAt: Date(timeIntervalSince1970: 1_800_000_000), origin: .api,
            payload: .receipt(
                ReceiptJob(
                    receipt: "MIIreceipt", style: .unified, bundleID: "com.example.ledgermoney",
                    submission: Submission(userIdentifier: user))))
        return ValidationRecord(
            envelope: envelope, status: .valid, environment: "sandbox", appleStatus: 0, purchases: [purchase], latestReceipt: nil,
            calls: [], validatedAt: Date(timeIntervalSince1970: 1_800_000_001))
    }

    func purchase(_ id: String, quantity: Int = 1) -> InAppPurchase {
        InAppPurchase(
            quantity: quantity, productID: "coins", transactionID: id, originalTransactionID: id,
            purchaseDate: Date(timeIntervalSince1970: 1_700_000_000))
    }

    func refundEvents(_ id: String) throws -> [String] {
        try connection.query(
            "SELECT data FROM events WHERE app_id = \(app.id) AND subject = \("purchase:\(id)") AND type = 'purchase.refunded' ORDER BY sequence"
        ).rows.compactMap { $0.string("data") }
    }

    @Test("A signed price and offer are stored as integers and read back; a later source without them keeps them")
    func priceSurvivesVerifyReceipt() throws {
        let id = "money-\(UUID().uuidString)"
        var signed = purchase(id)
        signed.price = Money(milli: 4990, currency: Self.usd)
        signed.storefront = "USA"
        signed.offer = PurchaseOffer(type: .promotional, identifier: "SPRING", discountType: "PAY_AS_YOU_GO", period: "P1M")
        signed.billingPlanType = "MONTHLY"
        signed.ownershipType = "PURCHASED"
        let store = PostgresReceiptStore(connection: connection)
        let stored = try #require(try store.save([record(signed)]).first?.get()?.inAppPurchases.first)
        #expect(stored.priceMilli == 4990 && stored.currency == "USD" && stored.offerType == "promotional")
        #expect(stored.offerIdentifier == "SPRING" && stored.offerPeriod == "P1M" && stored.billingPlanType == "MONTHLY")

        // verifyReceipt: no price, no discount details.
        var plain = purchase(id)
        plain.offer = PurchaseOffer(type: .promotional, identifier: "SPRING")
        let again = try #require(try store.save([record(plain)]).first?.get()?.inAppPurchases.first)
        #expect(again.priceMilli == 4990 && again.currency == "USD" && again.offerDiscountType == "PAY_AS_YOU_GO")
        let row = try #require(
            try connection.query("SELECT price_milli, offer_type, storefront FROM in_app_purchases WHERE transaction_id = \(id)").rows.first)
        #expect(row.int("price_milli") == 4990 && row.int("offer_type") == 2 && row.string("storefront") == "USA")
    }

    @Test("A prorated refund keeps the purchase, is one event with its amounts, and a larger share later is a second")
    func proratedRefund() throws {
        let id = "money-\(UUID().uuidString)"
        let price = Money(milli: 29_970, currency: Self.usd)
        var bought = purchase(id, quantity: 3)
        bought.price = price
        let store = PostgresReceiptStore(connection: connection)
        _ = try store.save([record(bought)])
        #expect(try refundEvents(id).isEmpty)

        var third = bought
        third.revocation = PurchaseRevocation(kind: .refundProrated, percentageMilli: 33_333, quantity: 3, price: price)
        // Twice in one batch, then replayed: stated once.
        _ = try store.save([record(third), record(third)])
        _ = try store.save([record(third)])
        let events = try refundEvents(id)
        #expect(events.count == 1)
        let data = try #require(events.first.flatMap { JSONValue.parseLeniently($0.utf8) })
        #expect(data["refunded_milli"] == .number(9990) && data["refunded_quantity"] == .number(1))
        #expect(data["currency"]?.stringValue == "USD" && data["revocation_type"]?.stringValue == "REFUND_PRORATED")
        #expect(data["remaining_quantity"] == .number(2) && data["purchase"]?["cancellation_date"] == nil)

        var twoThirds = bought
        twoThirds.revocation = PurchaseRevocation(kind: .refundProrated, percentageMilli: 66_667, quantity: 3, price: price)
        _ = try store.save([record(twoThirds)])
        #expect(try refundEvents(id).count == 2)
        let row = try #require(
            try connection.query(
                "SELECT cancellation_date, refunded_quantity, refunded_milli FROM in_app_purchases WHERE transaction_id = \(id)"
            ).rows.first)
        #expect(row.date("cancellation_date") == nil && row.int("refunded_quantity") == 2 && row.int("refunded_milli") == 19_980)
    }

    @Test("A full refund signed with its kind keeps that kind when verifyReceipt later reports the same cancellation")
    func fullRefundKeepsItsKind() throws {
        let id = "money-\(UUID().uuidString)"
        let price = Money(milli: 990, currency: Self.usd)
        var refunded = purchase(id)
        refunded.price = price
        refunded.cancellationDate = Date(timeIntervalSince1970: 1_700_100_000)
        refunded.revocation = PurchaseRevocation(kind: .refundFull, percentageMilli: 100_000, quantity: 1, price: price)
        let store = PostgresReceiptStore(connection: connection)
        _ = try store.save([record(refunded)])
        var seen = purchase(id)
        seen.cancellationDate = refunded.cancellationDate
        let stored = try #require(try store.save([record(seen)]).first?.get()?.inAppPurchases.first)
        #expect(stored.revocationType == "REFUND_FULL" && stored.refundedMilli == 990 && stored.remainingQuantity == 0)
        #expect(try refundEvents(id).count == 1)
    }
}
