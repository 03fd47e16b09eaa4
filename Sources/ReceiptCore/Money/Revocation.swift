import Foundation

/// How Apple took a transaction back (`revocationType`, 2025-12).
public enum RevocationKind: String, Sendable, Codable, CaseIterable {
    /// The whole transaction refunded: the purchase is as if never made.
    case refundFull = "REFUND_FULL"
    /// Part of the transaction refunded (`revocationPercentage`): the purchase stays, with fewer
    /// units or less value left.
    case refundProrated = "REFUND_PRORATED"
    /// Family Sharing access withdrawn from the family member the transaction belongs to: no money
    /// moved, only that member's access ends.
    case familyRevoke = "FAMILY_REVOKE"

    /// Whether the purchase is revoked as a whole (false: it stays, partly refunded).
    public var revokesPurchase: Bool { self != .refundProrated }
}

/// A refund or revocation of one transaction, as stored with it.
public struct PurchaseRevocation: Hashable, Sendable, Codable {
    /// Nil when Apple did not say (transactions signed before `revocationType` existed, and
    /// `verifyReceipt`): a full revocation.
    public var kind: RevocationKind?
    /// Apple's `revocationPercentage`: the part refunded in milli-percent (100000 is the whole).
    public var percentageMilli: Int?
    /// The units refunded (see ``RefundProration``); nil for a Family Sharing revocation.
    public var quantity: Int?
    /// The amount refunded, in milli-units of the purchase's currency; nil without a price, and for
    /// a Family Sharing revocation (the member paid nothing).
    public var amountMilli: Int64?

    /// Creates a revocation.
    public init(kind: RevocationKind?, percentageMilli: Int? = nil, quantity: Int? = nil, amountMilli: Int64? = nil) {
        self.kind = kind
        self.percentageMilli = percentageMilli
        self.quantity = quantity
        self.amountMilli = amountMilli
    }

    /// What Apple's revocation of a transaction of `quantity` units priced `price` refunds.
    ///
    /// A full refund (or one of unknown kind) refunds every unit and the whole price; a prorated
    /// one its percentage of both (``RefundProration``); a Family Sharing revocation refunds
    /// nothing, it only ends the member's access.
    public init(kind: RevocationKind?, percentageMilli reported: Int?, quantity: Int, price: Money?) {
        // Apple's documented range; anything beyond is read as the nearer bound.
        let percentageMilli = reported.map { min(max($0, 0), RefundProration.whole) }
        switch kind {
        case .familyRevoke:
            self.init(kind: kind, percentageMilli: percentageMilli)
        case .refundProrated:
            let share = RefundProration(percentageMilli: percentageMilli ?? RefundProration.whole)
            self.init(
                kind: kind, percentageMilli: percentageMilli, quantity: share.units(of: quantity),
                amountMilli: price.map { share.amount(of: $0.milli) })
        case .refundFull, nil:
            self.init(
                kind: kind, percentageMilli: percentageMilli ?? (kind == nil ? nil : RefundProration.whole), quantity: quantity,
                amountMilli: price?.milli)
        }
    }

    /// Whether the purchase is revoked as a whole: everything but a prorated refund.
    public var revokesPurchase: Bool { kind?.revokesPurchase ?? true }
}

/// The arithmetic of a prorated refund: Apple's `revocationPercentage` (milli-percent, 0…100000)
/// applied to a transaction's units and price, in integers.
///
/// Rounding: to the nearest integer, halves away from zero (`(value × percentage + 50000) /
/// 100000`), so a third refunded (33333) of 3 units is 1 unit (0.99999 → 1) and of 9990 milli is
/// 3330 milli (3329.967 → 3330). Results are clamped to the whole (never more than was bought).
public struct RefundProration: Hashable, Sendable {
    /// 100 % in milli-percent.
    public static let whole = 100_000

    /// The share refunded, clamped to 0…100000.
    public let percentageMilli: Int

    /// Creates the proration of `percentageMilli` (clamped to 0…100000).
    public init(percentageMilli: Int) {
        self.percentageMilli = min(max(percentageMilli, 0), Self.whole)
    }

    /// The units of `quantity` refunded.
    public func units(of quantity: Int) -> Int {
        Int(share(of: Int64(max(quantity, 0))))
    }

    /// The milli-units of `milli` refunded (a negative amount is refunded as its share too).
    public func amount(of milli: Int64) -> Int64 {
        milli < 0 ? -share(of: -milli) : share(of: milli)
    }

    /// `value × percentage / 100000`, rounded half up, without overflow for any Int64 value.
    private func share(of value: Int64) -> Int64 {
        let whole = Int64(Self.whole)
        let percentage = Int64(percentageMilli)
        // Split value into quotient and remainder by 100000 so no product exceeds 100000².
        let (high, low) = value.quotientAndRemainder(dividingBy: whole)
        return high * percentage + (low * percentage + whole / 2) / whole
    }
}

extension InAppPurchase {
    /// The units still owned: none once revoked, else the quantity less the units a prorated
    /// refund took back.
    public var remainingQuantity: Int {
        if cancellationDate != nil { return 0 }
        return max(0, quantity - (revocation?.quantity ?? 0))
    }
}
