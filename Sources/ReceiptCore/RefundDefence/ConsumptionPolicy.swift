import Foundation

/// How an app answers Apple's `CONSUMPTION_REQUEST` (a customer asked Apple for a refund): the
/// per-app policy an operator sets (`receiptq apps consumption-policy`).
public enum ConsumptionPolicy: String, Sendable, CaseIterable, Codable {
    /// Nothing is sent: Apple decides without the app's word.
    case off
    /// The facts are sent without a refund preference.
    case neutral
    /// The facts are sent with a preference to decline a delivered purchase.
    case preferDecline = "prefer_decline"
    /// The facts are sent with a preference to grant the refund.
    case preferGrant = "prefer_grant"
}

/// Send Consumption Information v2's `deliveryStatus`: whether the app delivered a purchase that works.
public enum ConsumptionDeliveryStatus: String, Sendable, CaseIterable, Codable {
    case delivered = "DELIVERED"
    case undeliveredQualityIssue = "UNDELIVERED_QUALITY_ISSUE"
    case undeliveredWrongItem = "UNDELIVERED_WRONG_ITEM"
    case undeliveredServerOutage = "UNDELIVERED_SERVER_OUTAGE"
    case undeliveredOther = "UNDELIVERED_OTHER"
}

/// Send Consumption Information v2's `refundPreference`: the app's wish, which Apple weighs.
public enum RefundPreference: String, Sendable, CaseIterable, Codable {
    case decline = "DECLINE"
    case grantFull = "GRANT_FULL"
    case grantProrated = "GRANT_PRORATED"
}

/// A band of what a customer spent in the app over its lifetime (the purchases receiptq holds, in
/// their own currency's milli-units), for the audit trail and the customer view: Apple's v2 body no
/// longer carries it, the policy reads it.
public enum LifetimeSpendBand: String, Sendable, CaseIterable, Codable {
    case none
    case under50 = "under_50"
    case under500 = "under_500"
    case over500 = "over_500"

    /// The band of `milli` milli-units (of the customer's main currency).
    public init(milli: Int64) {
        switch milli {
        case ...0: self = .none
        case ..<50_000: self = .under50
        case ..<500_000: self = .under500
        default: self = .over500
        }
    }
}

/// What the app's backend posted about one of its users (`PUT /client/users/{user}/consumption`):
/// the consent Apple requires, and what it alone can know of the use.
public struct CustomerConsumption: Sendable, Equatable, Codable {
    /// Whether the customer consented to share consumption data with Apple.
    public var consented: Bool
    /// The delivery of the user's purchases as the app knows it (nil: delivered, as far as receiptq knows).
    public var deliveryStatus: ConsumptionDeliveryStatus?
    /// How much of the purchase the customer used, in milli-percent (0…100 000); nil: not known.
    public var consumptionPercentage: Int?
    /// Whether the app offered a free sample or trial, or described the content, before the purchase.
    public var sampleContentProvided: Bool
    /// How long the customer used the app, in seconds; nil: not posted.
    public var playTimeSeconds: Int64?

    /// The highest ``consumptionPercentage`` (100 %).
    public static let fullConsumption = 100_000

    /// Creates a statement.
    public init(
        consented: Bool, deliveryStatus: ConsumptionDeliveryStatus? = nil, consumptionPercentage: Int? = nil,
        sampleContentProvided: Bool = false, playTimeSeconds: Int64? = nil
    ) {
        self.consented = consented
        self.deliveryStatus = deliveryStatus
        self.consumptionPercentage = consumptionPercentage
        self.sampleContentProvided = sampleContentProvided
        self.playTimeSeconds = playTimeSeconds
    }
}

/// What receiptq knows when a consumption request comes: the purchase, its customer's history and
/// what the app posted about the customer.
public struct ConsumptionFacts: Sendable, Equatable {
    /// The app's policy.
    public var policy: ConsumptionPolicy
    /// Whether this request was answered already (a replayed job sends nothing twice).
    public var alreadyAnswered: Bool
    /// Whether receiptq holds the purchase (a purchase it never saw was not delivered through it).
    public var purchaseKnown: Bool
    /// The purchase's user (nil: none known).
    public var userIdentifier: String?
    /// What the customer spent in the app, in milli-units of ``currency``.
    public var lifetimeSpendMilli: Int64
    public var currency: String?
    /// How many of the customer's purchases were refunded or revoked before.
    public var refundedPurchases: Int
    /// What the app posted about the customer (nil: nothing).
    public var customer: CustomerConsumption?

    /// Creates the facts.
    public init(
        policy: ConsumptionPolicy, alreadyAnswered: Bool = false, purchaseKnown: Bool = true, userIdentifier: String? = nil,
        lifetimeSpendMilli: Int64 = 0, currency: String? = nil, refundedPurchases: Int = 0,
        customer: CustomerConsumption? = nil
    ) {
        self.policy = policy
        self.alreadyAnswered = alreadyAnswered
        self.purchaseKnown = purchaseKnown
        self.userIdentifier = userIdentifier
        self.lifetimeSpendMilli = lifetimeSpendMilli
        self.currency = currency
        self.refundedPurchases = refundedPurchases
        self.customer = customer
    }

    /// The band of ``lifetimeSpendMilli``.
    public var spendBand: LifetimeSpendBand { LifetimeSpendBand(milli: lifetimeSpendMilli) }
}
