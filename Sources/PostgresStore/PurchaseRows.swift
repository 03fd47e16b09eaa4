import Foundation
import Libpq
import ReceiptCore

/// One reading of an `in_app_purchases` row as an ``InAppPurchase``, for every statement that
/// reads the ledger back (receipts, the entitlement API, the events of a write), so a column added
/// to the ledger is read the same way everywhere.
enum PurchaseRows {
    /// The columns ``purchase(_:)`` reads, qualified by `alias` (`p.environment, p.transaction_id, …`).
    static func columns(_ alias: String) -> String {
        names.map { "\(alias).\($0)" }.joined(separator: ", ")
    }

    private static let names = [
        "environment", "transaction_id", "original_transaction_id", "product_id", "quantity", "purchase_date",
        "original_purchase_date", "expires_date", "cancellation_date", "cancellation_reason", "web_order_line_item_id",
        "is_trial_period", "is_in_intro_offer_period", "price_milli", "currency", "storefront", "offer_type", "offer_identifier",
        "offer_discount_type", "offer_period", "billing_plan_type", "ownership_type", "revocation_type", "revocation_percentage",
        "refunded_quantity", "refunded_milli",
    ]

    /// The purchase a row of ``columns(_:)`` states.
    static func purchase(_ row: PostgresRow) -> InAppPurchase {
        let transactionID = row.string("transaction_id") ?? ""
        var purchase = InAppPurchase(
            quantity: row.int("quantity") ?? 1, productID: row.string("product_id") ?? "", transactionID: transactionID,
            originalTransactionID: row.string("original_transaction_id") ?? transactionID, purchaseDate: row.date("purchase_date"),
            originalPurchaseDate: row.date("original_purchase_date"), expiresDate: row.date("expires_date"),
            cancellationDate: row.date("cancellation_date"), webOrderLineItemID: row.string("web_order_line_item_id"),
            isTrialPeriod: row.bool("is_trial_period") ?? false, isInIntroOfferPeriod: row.bool("is_in_intro_offer_period") ?? false)
        purchase.cancellationReason = row.int("cancellation_reason")
        purchase.price = Money(milli: row.int("price_milli").map(Int64.init), currency: row.string("currency"))
        purchase.storefront = row.string("storefront")
        purchase.offer = row.int("offer_type").flatMap(OfferType.init(appleCode:)).map {
            PurchaseOffer(
                type: $0, identifier: row.string("offer_identifier"), discountType: row.string("offer_discount_type"),
                period: row.string("offer_period"))
        }
        if purchase.offer?.type == .promotional { purchase.promotionalOfferID = purchase.offer?.identifier }
        purchase.billingPlanType = row.string("billing_plan_type")
        purchase.ownershipType = row.string("ownership_type")
        let revocation = PurchaseRevocation(
            kind: row.string("revocation_type").flatMap(RevocationKind.init(rawValue:)), percentageMilli: row.int("revocation_percentage"),
            quantity: row.int("refunded_quantity"), amountMilli: row.int("refunded_milli").map(Int64.init))
        // A cancellation verifyReceipt reported states no revocation: the row reads back as written.
        if revocation != PurchaseRevocation(kind: nil) { purchase.revocation = revocation }
        return purchase
    }
}

extension InAppPurchase {
    /// The ledger's money and refund columns of this purchase, in the order of the batch statement:
    /// price_milli, currency, storefront, offer_type, offer_identifier, offer_discount_type,
    /// offer_period, billing_plan_type, ownership_type, revocation_type, revocation_percentage,
    /// refunded_quantity, refunded_milli.
    var moneyColumns: [ColumnValue] {
        [
            .int(price.map { Int($0.milli) }), .text(price?.currency.rawValue), .text(storefront), .int(statedOffer?.type.appleCode),
            .text(statedOffer?.identifier), .text(statedOffer?.discountType), .text(statedOffer?.period), .text(billingPlanType),
            .text(ownershipType),
            .text(revocation?.kind?.rawValue), .int(revocation?.percentageMilli), .int(revocation?.quantity),
            .int(revocation?.amountMilli.map { Int($0) }),
        ]
    }

    /// The element types of ``moneyColumns``.
    static let moneyColumnTypes: [PostgresBinaryArray.Element] = [
        .int8, .text, .text, .int4, .text, .text, .text, .text, .text, .text, .int4, .int4, .int8,
    ]
}
