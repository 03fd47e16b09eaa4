import Foundation

/// The body of Send Consumption Information v2 (`PUT /inApps/v2/transactions/consumption/{transactionId}`).
public struct ConsumptionInformation: Sendable, Equatable {
    /// Always true: Apple refuses a body without the customer's consent (a customer who did not
    /// consent is not answered at all).
    public var customerConsented: Bool
    public var deliveryStatus: ConsumptionDeliveryStatus
    public var sampleContentProvided: Bool
    /// Milli-percent, 0…100 000; absent when the app did not say.
    public var consumptionPercentage: Int?
    /// Absent under the `neutral` policy.
    public var refundPreference: RefundPreference?

    /// Creates a body.
    public init(
        customerConsented: Bool = true, deliveryStatus: ConsumptionDeliveryStatus, sampleContentProvided: Bool,
        consumptionPercentage: Int? = nil, refundPreference: RefundPreference? = nil
    ) {
        self.customerConsented = customerConsented
        self.deliveryStatus = deliveryStatus
        self.sampleContentProvided = sampleContentProvided
        self.consumptionPercentage = consumptionPercentage
        self.refundPreference = refundPreference
    }

    /// Apple's JSON (absent members omitted).
    public var json: JSONValue {
        var members: [String: JSONValue] = [
            "customerConsented": .bool(customerConsented), "deliveryStatus": .string(deliveryStatus.rawValue),
            "sampleContentProvided": .bool(sampleContentProvided),
        ]
        if let consumptionPercentage { members["consumptionPercentage"] = .number(Double(consumptionPercentage)) }
        if let refundPreference { members["refundPreference"] = .string(refundPreference.rawValue) }
        return .object(members)
    }
}

/// Why a consumption request is not answered.
public enum ConsumptionSkip: String, Sendable, Equatable, CaseIterable {
    /// The app's policy is `off`.
    case policyOff = "policy_off"
    /// It was answered already (a replay).
    case alreadyAnswered = "already_answered"
    /// The customer did not consent (or the app never said): Apple accepts no body without it.
    case noConsent = "no_consent"
}

/// What to do with a consumption request: answer with a body, or not at all.
public enum ConsumptionDecision: Sendable, Equatable {
    case send(ConsumptionInformation)
    case skip(ConsumptionSkip)
}

/// The refund defence's rule, pure: the body an app's policy makes of what receiptq knows.
///
/// - `off`: nothing is sent. Nor when the customer did not consent (Apple refuses such a body), or
///   the request was answered already.
/// - The facts: `deliveryStatus` as the app posted it, else `DELIVERED` for a purchase receiptq
///   holds and `UNDELIVERED_OTHER` for one it never saw; `consumptionPercentage` and
///   `sampleContentProvided` as the app posted them.
/// - The preference: none under `neutral`; an undelivered purchase is never defended (`GRANT_FULL`
///   under either preference); `prefer_decline` asks to decline; `prefer_grant` asks for a full
///   refund of an unused purchase by a customer never refunded before, else a prorated one.
public enum RefundDefence {
    /// The decision for `facts`.
    public static func decide(_ facts: ConsumptionFacts) -> ConsumptionDecision {
        guard facts.policy != .off else { return .skip(.policyOff) }
        guard !facts.alreadyAnswered else { return .skip(.alreadyAnswered) }
        guard let customer = facts.customer, customer.consented else { return .skip(.noConsent) }
        let delivery = customer.deliveryStatus ?? (facts.purchaseKnown ? .delivered : .undeliveredOther)
        let consumed = customer.consumptionPercentage.map { min(CustomerConsumption.fullConsumption, max(0, $0)) }
        let preference: RefundPreference?
        switch (facts.policy, delivery) {
        case (.off, _), (.neutral, _):
            preference = nil
        case (.preferDecline, .delivered):
            preference = .decline
        case (.preferGrant, .delivered):
            preference = (consumed ?? 0) == 0 && facts.refundedPurchases == 0 ? .grantFull : .grantProrated
        case (.preferDecline, _), (.preferGrant, _):
            preference = .grantFull
        }
        return .send(
            ConsumptionInformation(
                deliveryStatus: delivery, sampleContentProvided: customer.sampleContentProvided, consumptionPercentage: consumed,
                refundPreference: preference))
    }

    /// How long Apple waits for the answer after it signed the request.
    public static let answerWindow: TimeInterval = 12 * 3600
}
