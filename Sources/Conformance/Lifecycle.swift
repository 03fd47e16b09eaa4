import Foundation
import ReceiptCore

/// The kinds of customer story the model tells; each timeline is one of them.
public enum Scenario: String, Sendable, CaseIterable, Comparable {
    /// A free trial, renewals, auto-renew turned off, the subscription expires.
    case trialVoluntaryExpiry = "trial_voluntary_expiry"
    /// An introductory offer, renewals, a failed renewal, billing retry, the subscription expires.
    case introInvoluntaryExpiry = "intro_involuntary_expiry"
    /// Renewals, a failed renewal under Billing Grace Period, billing recovered, renewals again.
    case graceRecovery = "grace_recovery"
    /// Renewals, then Apple refunds the current period in full.
    case refund
    /// A monthly subscription upgraded to premium within the group, then renewals.
    case upgrade
    /// A consumable bought: no entitlement.
    case consumable
    /// A non-consumable bought: its entitlement for good.
    case nonConsumable = "non_consumable"
    /// A non-consumable bought, then restored on the customer's second device.
    case restoreSecondDevice = "restore_second_device"
    /// A subscription bought by one app user, then presented by another app user signed in to
    /// the same Apple account (the app's default transfer rule: the first keeps it).
    case sharedAppleAccount = "shared_apple_account"
    /// Renewals, a refund request Apple declines (`REFUND_DECLINED`): nothing changes, renewals go on.
    case refundDeclined = "refund_declined"
    /// Apple refunds the current period (`REFUND`), then reverses the refund (`REFUND_REVERSED`):
    /// the period is the customer's again, renewals go on.
    case refundReversed = "refund_reversed"
    /// Apple refunds part of the current period (`REFUND` with `revocationType` `REFUND_PRORATED`):
    /// the subscription stands, renewals go on.
    case proratedRefund = "prorated_refund"
    /// A family member's device presents the organiser's subscription (`inAppOwnershipType`
    /// `FAMILY_SHARED`, a transaction of the member's own); both renew, then sharing stops
    /// (`REVOKE`): the member loses it, the organiser keeps it.
    case familySharing = "family_sharing"
    /// A premium subscriber downgrades to monthly (`DID_CHANGE_RENEWAL_PREF` `DOWNGRADE`): premium
    /// until the period's end, monthly from the renewal on.
    case downgrade
    /// Auto-renew turned off, then on again before the period ends (`AUTO_RENEW_ENABLED`): renewals go on.
    case autoRenewReenabled = "auto_renew_reenabled"
    /// Apple extends the current period (`RENEWAL_EXTENDED`): the expiry moves, renewals go on from it.
    case renewalExtended = "renewal_extended"
    /// A price increase the customer consents to (`PRICE_INCREASE` `PENDING`, then `ACCEPTED`):
    /// renewals go on, at the new price.
    case priceIncreaseAccepted = "price_increase_accepted"
    /// A price increase the customer never consents to (`PRICE_INCREASE` `PENDING`): the
    /// subscription expires at the period's end (`EXPIRED` `PRICE_INCREASE`).
    case priceIncreaseDeclined = "price_increase_declined"
    /// A new subscriber redeems an offer code (`offerType` 3, `OFFER_REDEEMED` `INITIAL_BUY`), then renewals.
    case offerCode = "offer_code"
    /// A subscriber lets the subscription lapse, then comes back with a win-back offer (`offerType`
    /// 4, `SUBSCRIBED` `RESUBSCRIBE`): the same subscription, renewing again.
    case winBack = "win_back"

    public static func < (lhs: Scenario, rhs: Scenario) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// An offer on a subscription's first period (of a new subscription, or a resumed one).
public enum IntroOffer: Sendable, Equatable {
    /// A free trial of ``Lifecycle/trialLength``.
    case freeTrial
    /// A discounted first month.
    case payUpFront
    /// A discounted first month redeemed with an offer code (`offerType` 3).
    case offerCode
    /// A discounted first month of a lapsed subscriber's return (`offerType` 4).
    case winBack
}

/// Why Apple ended a subscription (its `EXPIRED` subtype).
public enum ExpiryIntent: Sendable, Equatable {
    /// The customer turned auto-renew off (`VOLUNTARY`).
    case voluntary
    /// Billing retry ended without a charge (`BILLING_RETRY`).
    case billingRetry
    /// The customer never consented to a price increase (`PRICE_INCREASE`).
    case priceIncrease

    /// Apple's `EXPIRED` subtype.
    public var subtype: String {
        switch self {
        case .voluntary: "VOLUNTARY"
        case .billingRetry: "BILLING_RETRY"
        case .priceIncrease: "PRICE_INCREASE"
        }
    }
}

/// What happens at one step of a customer's timeline: a device posts, or Apple changes something
/// (and notifies).
public enum Action: Sendable, Equatable, CustomStringConvertible {
    /// The device of app user `user` (an index in ``Timeline/users``) buys `product` and posts
    /// the signed transaction.
    case purchase(ConformanceCatalogue.Product, offer: IntroOffer?, user: Int)
    /// A device of app user `user` posts the customer's latest transaction again (a restore on a
    /// second device, or another app user on the same Apple account).
    case restore(user: Int)
    /// Apple renews the subscription for another month (`DID_RENEW`).
    case renew
    /// The customer turns auto-renew off (`DID_CHANGE_RENEWAL_STATUS` `AUTO_RENEW_DISABLED`).
    case autoRenewOff
    /// A renewal fails to charge (`DID_FAIL_TO_RENEW`, with `GRACE_PERIOD` when grace applies).
    case failToRenew(grace: Bool)
    /// The failed renewal is charged after all (`DID_RENEW` `BILLING_RECOVERY`).
    case recover
    /// The subscription ends (`EXPIRED`).
    case expire(ExpiryIntent)
    /// Apple refunds the latest transaction in full (`REFUND`).
    case refund
    /// The customer upgrades to `product`, at once (`DID_CHANGE_RENEWAL_PREF` `UPGRADE`).
    case upgrade(to: ConformanceCatalogue.Product)
    /// Apple declines the customer's refund request for the latest transaction (`REFUND_DECLINED`).
    case refundDeclined
    /// Apple reverses the refund of the latest transaction (`REFUND_REVERSED`).
    case refundReversed
    /// Apple refunds `percentageMilli` of the latest transaction (`REFUND`, `REFUND_PRORATED`).
    case proratedRefund(percentageMilli: Int)
    /// The device of family member `user` presents the organiser's subscription: a transaction
    /// of the member's own, `FAMILY_SHARED`, ending with the organiser's period.
    case familyShare(user: Int)
    /// Family Sharing stops: the member `user`'s transaction is revoked (`REVOKE`).
    case revoke(user: Int)
    /// The customer downgrades (or crossgrades) to `product` from the next renewal on
    /// (`DID_CHANGE_RENEWAL_PREF` `DOWNGRADE`).
    case downgrade(to: ConformanceCatalogue.Product)
    /// The customer turns auto-renew back on (`DID_CHANGE_RENEWAL_STATUS` `AUTO_RENEW_ENABLED`).
    case autoRenewOn
    /// Apple extends the current period by `days` days (`RENEWAL_EXTENDED`).
    case extend(days: Int)
    /// Apple announces a price increase (`PRICE_INCREASE` `PENDING`), or the customer consents to
    /// it (`ACCEPTED`).
    case priceIncrease(accepted: Bool)
    /// The lapsed subscriber's device buys the subscription again, with `offer`, and posts the
    /// signed transaction; Apple tells of it (`SUBSCRIBED` `RESUBSCRIBE`).
    case resubscribe(offer: IntroOffer?)

    public var description: String {
        switch self {
        case .purchase(let product, let offer, let user): "u\(user) buys \(product.rawValue)\(offer.map { " (\($0))" } ?? "")"
        case .restore(let user): "u\(user) restores"
        case .renew: "DID_RENEW"
        case .autoRenewOff: "DID_CHANGE_RENEWAL_STATUS AUTO_RENEW_DISABLED"
        case .failToRenew(let grace): "DID_FAIL_TO_RENEW\(grace ? " GRACE_PERIOD" : "")"
        case .recover: "DID_RENEW BILLING_RECOVERY"
        case .expire(let intent): "EXPIRED \(intent.subtype)"
        case .refund: "REFUND"
        case .upgrade(let product): "DID_CHANGE_RENEWAL_PREF UPGRADE to \(product.rawValue)"
        case .refundDeclined: "REFUND_DECLINED"
        case .refundReversed: "REFUND_REVERSED"
        case .proratedRefund(let share): "REFUND REFUND_PRORATED \(share / 1000)%"
        case .familyShare(let user): "u\(user) holds it by Family Sharing"
        case .revoke(let user): "REVOKE u\(user)"
        case .downgrade(let product): "DID_CHANGE_RENEWAL_PREF DOWNGRADE to \(product.rawValue)"
        case .autoRenewOn: "DID_CHANGE_RENEWAL_STATUS AUTO_RENEW_ENABLED"
        case .extend(let days): "RENEWAL_EXTENDED by \(days) days"
        case .priceIncrease(let accepted): "PRICE_INCREASE \(accepted ? "ACCEPTED" : "PENDING")"
        case .resubscribe(let offer): "resubscribes\(offer.map { " (\($0))" } ?? ""), SUBSCRIBED RESUBSCRIBE"
        }
    }

    /// Whether a device makes this step (the rest is Apple's, told by a notification).
    public var isDevicePost: Bool {
        switch self {
        case .purchase, .restore, .familyShare, .resubscribe: true
        default: false
        }
    }
}

/// One entitlement the ground truth says a user holds: its id, and until when (nil: for good).
public struct HeldEntitlement: Sendable, Equatable, Comparable, CustomStringConvertible {
    public var id: String
    public var until: Date?

    public init(id: String, until: Date?) {
        self.id = id
        self.until = until
    }

    public static func < (lhs: HeldEntitlement, rhs: HeldEntitlement) -> Bool { lhs.id < rhs.id }

    public var description: String { "\(id) until \(until.map(Lifecycle.format) ?? "for good")" }
}

/// An event a customer's backend should receive about app user `user`.
public struct ExpectedEvent: Sendable, Equatable {
    public var user: Int
    public var type: EventType

    public init(user: Int, _ type: EventType) {
        self.user = user
        self.type = type
    }
}

/// One step: when, what, and the ground truth after it.
public struct Step: Sendable, Equatable {
    public var at: Date
    public var action: Action
    /// What each user holds from this instant on, until the next step (filter by `until` to ask
    /// at a later instant: ``Timeline/truth(user:at:)``).
    public var holdings: [[HeldEntitlement]]
    /// The events this step should send, in order.
    public var events: [ExpectedEvent]
}

/// One customer's story: its app users, its scenario, its steps in time order.
public struct Timeline: Sendable, Equatable {
    public var customer: Int
    public var scenario: Scenario
    /// The customer's app user ids (a second one only when two app users share an Apple account,
    /// or for the family member holding the subscription by Family Sharing).
    public var users: [String]
    public var steps: [Step]

    /// The entitlements app user `user` holds at `instant`: the holdings of the last step at or
    /// before it, without those ended by then.
    public func truth(user: Int, at instant: Date) -> [HeldEntitlement] {
        guard let step = steps.last(where: { $0.at <= instant }) else { return [] }
        return step.holdings[user].filter { $0.until.map { $0 > instant } ?? true }
    }

    /// Every event the timeline should send about app user `user`, in order.
    public func expectedEvents(user: Int) -> [EventType] {
        steps.flatMap { $0.events.filter { $0.user == user }.map(\.type) }
    }

    /// The timeline as lines a person reads next to a disagreement.
    public var narrative: String {
        var lines = ["customer \(customer) (\(scenario.rawValue)), users \(users.joined(separator: ", "))"]
        for step in steps {
            let held = step.holdings.enumerated().map { "u\($0.offset): [\($0.element.map(\.description).joined(separator: ", "))]" }
            let events = step.events.map { "u\($0.user) \($0.type.rawValue)" }.joined(separator: ", ")
            lines.append("  \(Lifecycle.format(step.at)) \(step.action) → \(held.joined(separator: " ")) events: [\(events)]")
        }
        return lines.joined(separator: "\n")
    }
}

/// The lifecycle model's constants: Apple's periods as the mock App Store plays them.
public enum Lifecycle {
    /// A subscription month.
    public static let month: TimeInterval = 30 * 86_400
    /// A free trial.
    public static let trialLength: TimeInterval = 7 * 86_400
    /// Billing Grace Period (the mock's 16 days).
    public static let gracePeriod: TimeInterval = 16 * 86_400
    /// How long billing retry runs before Apple gives up in the model.
    public static let billingRetry: TimeInterval = 10 * 86_400

    static func format(_ date: Date) -> String {
        date.formatted(.iso8601.year().month().day().time(includingFractionalSeconds: false))
    }
}
