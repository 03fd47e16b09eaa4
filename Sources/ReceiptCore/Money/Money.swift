import Foundation

/// An ISO 4217 currency code: three ASCII capital letters (`USD`, `EUR`, `JPY`), as Apple writes
/// `currency` in a signed transaction.
public struct CurrencyCode: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public let rawValue: String

    /// Nil unless `rawValue` is three ASCII capital letters.
    public init?(rawValue: String) {
        guard rawValue.utf8.count == 3, rawValue.utf8.allSatisfy({ (65...90).contains($0) }) else { return nil }
        self.rawValue = rawValue
    }

    public var description: String { rawValue }
}

/// An amount of money: an integer count of thousandths of one unit of `currency` (Apple's
/// "milliunits": 9.99 USD is 9990), never a floating-point number, so that sums and refunds are
/// exact.
public struct Money: Hashable, Sendable, Codable {
    /// Thousandths of one unit of ``currency``.
    public var milli: Int64
    public var currency: CurrencyCode

    /// Creates an amount.
    public init(milli: Int64, currency: CurrencyCode) {
        self.milli = milli
        self.currency = currency
    }

    /// The amount as decimal text, by integer arithmetic (`9990` → `9.99`, `1500` → `1.50`,
    /// `1234` → `1.234`): at least two decimals, the third only when it is not zero.
    public var decimalText: String { Self.decimalText(thousandths: milli) }

    /// Any count of thousandths as decimal text (an amount in milli-units, a share in
    /// milli-percent), as ``decimalText`` writes it.
    public static func decimalText(thousandths milli: Int64) -> String {
        let magnitude = milli.magnitude
        var fraction = String(magnitude % 1000)
        fraction = String(repeating: "0", count: 3 - fraction.count) + fraction
        if fraction.hasSuffix("0") { fraction.removeLast() }
        return "\(milli < 0 ? "-" : "")\(magnitude / 1000).\(fraction)"
    }

    /// Apple's `price` and `currency` of one signed transaction; nil unless both are present and
    /// the currency is an ISO 4217 code.
    public init?(milli: Int64?, currency: String?) {
        guard let milli, let code = currency.flatMap(CurrencyCode.init(rawValue:)) else { return nil }
        self.init(milli: milli, currency: code)
    }
}

/// What kind of offer a transaction was bought under (Apple's `offerType`).
public enum OfferType: String, Sendable, Codable, CaseIterable {
    case introductory
    case promotional
    case offerCode = "offer_code"
    case winBack = "win_back"

    /// Apple's number for it: 1 introductory, 2 promotional, 3 offer code, 4 win-back.
    public var appleCode: Int {
        switch self {
        case .introductory: 1
        case .promotional: 2
        case .offerCode: 3
        case .winBack: 4
        }
    }

    /// The type Apple's number names; nil for a number Apple has not documented.
    public init?(appleCode: Int) {
        guard let type = Self.allCases.first(where: { $0.appleCode == appleCode }) else { return nil }
        self = type
    }
}

/// The offer a transaction was bought under.
public struct PurchaseOffer: Hashable, Sendable, Codable {
    public var type: OfferType
    /// The promotional offer's id or the offer code's reference name (nil for an introductory offer).
    public var identifier: String?
    /// Apple's `offerDiscountType` as signed: `FREE_TRIAL`, `PAY_AS_YOU_GO`, `PAY_UP_FRONT`,
    /// `ONE_TIME` (kept verbatim: Apple adds values).
    public var discountType: String?
    /// The offer's length, an ISO 8601 duration (`P1M`, `P7D`).
    public var period: String?

    /// Creates an offer.
    public init(type: OfferType, identifier: String? = nil, discountType: String? = nil, period: String? = nil) {
        self.type = type
        self.identifier = identifier
        self.discountType = discountType
        self.period = period
    }
}

extension InAppPurchase {
    /// The offer the purchase was bought under: as Apple signed it, else as verifyReceipt's fields
    /// say it (`promotional_offer_id`, `is_trial_period`, `is_in_intro_offer_period`, which it
    /// keeps in ``promotionalOfferID``, ``isTrialPeriod`` and ``isInIntroOfferPeriod``).
    public var statedOffer: PurchaseOffer? {
        if let offer { return offer }
        if let promotionalOfferID { return PurchaseOffer(type: .promotional, identifier: promotionalOfferID) }
        if isTrialPeriod { return PurchaseOffer(type: .introductory, discountType: "FREE_TRIAL") }
        return isInIntroOfferPeriod ? PurchaseOffer(type: .introductory) : nil
    }
}
