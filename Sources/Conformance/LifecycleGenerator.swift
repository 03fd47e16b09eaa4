import Foundation
import ReceiptCore
import ReceiptTesting

/// Makes customers' timelines from a seed: the same seed, customers, days and start give the same
/// timelines. Scenarios are dealt round-robin (every scenario appears once `customers` reaches
/// their number); the moments, the number of renewals and the lengths of trouble are random.
public struct LifecycleGenerator: Sendable {
    public let catalogue: ConformanceCatalogue
    public let start: Date
    public let days: Int
    public let seed: UInt64
    /// Prefixes the app user ids (`<prefix>-<customer>`, `<prefix>-<customer>-b`).
    public let userPrefix: String

    public init(catalogue: ConformanceCatalogue, start: Date, days: Int, seed: UInt64, userPrefix: String = "cf") {
        self.catalogue = catalogue
        self.start = start
        self.days = max(1, days)
        self.seed = seed
        self.userPrefix = userPrefix
    }

    /// The end of simulated time: nothing happens at or after it.
    public var horizon: Date { start.addingTimeInterval(Double(days) * 86_400) }

    /// The timelines of `customers` customers.
    public func timelines(customers: Int) -> [Timeline] {
        (0..<max(0, customers)).map { timeline(customer: $0) }
    }

    /// The timeline of customer `customer` (its own generator: one customer's story does not
    /// depend on how many others there are).
    public func timeline(customer: Int) -> Timeline {
        var random = SeededGenerator(seed: seed &+ UInt64(customer) &* 0x9E37_79B9)
        let scenario = Scenario.allCases[customer % Scenario.allCases.count]
        let second = scenario == .sharedAppleAccount || scenario == .familySharing
        let users = ["\(userPrefix)-\(customer)"] + (second ? ["\(userPrefix)-\(customer)-b"] : [])
        // The first purchase within the first tenth of the run, at a random second.
        let first = start.addingTimeInterval(Double.random(in: 60..<max(120, Double(days) * 8_640), using: &random).rounded())
        var story = Story(catalogue: catalogue, users: users.count, horizon: horizon, now: first)
        story.play(scenario, using: &random)
        return Timeline(customer: customer, scenario: scenario, users: users, steps: story.steps)
    }
}

/// The ground truth being written as a scenario plays: the one subscription's period and state,
/// the holdings after each step.
struct Story {
    let catalogue: ConformanceCatalogue
    let horizon: Date
    var now: Date
    var steps: [Step] = []
    var holdings: [[HeldEntitlement]]
    /// The subscription's product and the end of its current period.
    var product: ConformanceCatalogue.Product?
    var periodEnd: Date?
    /// The product the subscription renews into (a pending downgrade), when not ``product``.
    var renewsInto: ConformanceCatalogue.Product?
    /// The family members holding the subscription by Family Sharing: each renews with it.
    var members: [Int] = []

    init(catalogue: ConformanceCatalogue, users: Int, horizon: Date, now: Date) {
        self.catalogue = catalogue
        self.horizon = horizon
        self.now = now
        holdings = Array(repeating: [], count: users)
    }

    /// Whether a step at `date` still falls inside the run.
    func fits(_ date: Date) -> Bool { date < horizon }

    /// Records `action` at `date` with the holdings as they now stand; false (and nothing
    /// recorded) past the horizon.
    @discardableResult
    mutating func record(_ action: Action, at date: Date, events: [ExpectedEvent]) -> Bool {
        guard fits(date) else { return false }
        now = date
        steps.append(Step(at: date, action: action, holdings: holdings.map { $0.sorted() }, events: events))
        return true
    }

    /// `user` holds the entitlements of `product` until `until` (nil: for good), replacing what
    /// the subscription granted before.
    mutating func hold(_ product: ConformanceCatalogue.Product?, until: Date?, user: Int = 0) {
        let subscriptionEntitlements = Set(catalogue.entitlements(of: .monthly) + catalogue.entitlements(of: .premium))
        if product?.isSubscription ?? true { holdings[user].removeAll { subscriptionEntitlements.contains($0.id) } }
        guard let product else { return }
        for id in catalogue.entitlements(of: product) where !holdings[user].contains(where: { $0.id == id }) {
            holdings[user].append(HeldEntitlement(id: id, until: until))
        }
    }

    mutating func play(_ scenario: Scenario, using random: inout SeededGenerator) {
        switch scenario {
        case .trialVoluntaryExpiry:
            guard subscribe(.monthly, offer: .freeTrial) else { return }
            guard renewals(Int.random(in: 1...3, using: &random)) else { return }
            let off = now.addingTimeInterval(Double.random(in: 0.2...0.8, using: &random) * Lifecycle.month)
            guard record(.autoRenewOff, at: off, events: [ExpectedEvent(user: 0, .subscriptionAutoRenewChanged)]) else { return }
            let end = periodEnd!
            hold(nil, until: nil)
            record(.expire(.voluntary), at: end, events: [ExpectedEvent(user: 0, .subscriptionExpired)])
        case .introInvoluntaryExpiry:
            guard subscribe(.monthly, offer: .payUpFront), renewals(Int.random(in: 0...2, using: &random)) else { return }
            let end = periodEnd!
            hold(nil, until: nil)
            guard record(.failToRenew(grace: false), at: end, events: [ExpectedEvent(user: 0, .subscriptionBillingIssue)]) else { return }
            record(.expire(.billingRetry), at: end.addingTimeInterval(Lifecycle.billingRetry), events: [ExpectedEvent(user: 0, .subscriptionExpired)])
        case .graceRecovery:
            guard subscribe(.monthly, offer: nil), renewals(Int.random(in: 0...2, using: &random)) else { return }
            let end = periodEnd!
            hold(.monthly, until: end.addingTimeInterval(Lifecycle.gracePeriod))
            let failed = [ExpectedEvent(user: 0, .subscriptionBillingIssue), ExpectedEvent(user: 0, .subscriptionGracePeriodStarted)]
            guard record(.failToRenew(grace: true), at: end, events: failed) else { return }
            let recovered = end.addingTimeInterval(Double(Int.random(in: 1...10, using: &random)) * 86_400)
            periodEnd = recovered.addingTimeInterval(Lifecycle.month)
            hold(.monthly, until: periodEnd)
            let events = [ExpectedEvent(user: 0, .subscriptionBillingRecovered), ExpectedEvent(user: 0, .subscriptionRenewed)]
            guard record(.recover, at: recovered, events: events) else { return }
            renewals(.max)
        case .refund:
            guard subscribe(.monthly, offer: nil), renewals(Int.random(in: 0...2, using: &random)) else { return }
            let refunded = now.addingTimeInterval(Double.random(in: 0.1...0.9, using: &random) * Lifecycle.month)
            hold(nil, until: nil)
            record(.refund, at: refunded, events: [ExpectedEvent(user: 0, .subscriptionRefunded)])
        case .upgrade:
            guard subscribe(.monthly, offer: nil) else { return }
            let upgraded = now.addingTimeInterval(Double.random(in: 0.2...0.8, using: &random) * Lifecycle.month)
            product = .premium
            periodEnd = upgraded.addingTimeInterval(Lifecycle.month)
            hold(.premium, until: periodEnd)
            guard record(.upgrade(to: .premium), at: upgraded, events: [ExpectedEvent(user: 0, .subscriptionUpgraded)]) else { return }
            renewals(.max)
        case .consumable:
            record(.purchase(.coins, offer: nil, user: 0), at: now, events: [ExpectedEvent(user: 0, .receiptValidated)])
        case .nonConsumable:
            hold(.lifetime, until: nil)
            record(.purchase(.lifetime, offer: nil, user: 0), at: now, events: [ExpectedEvent(user: 0, .receiptValidated)])
        case .restoreSecondDevice:
            hold(.lifetime, until: nil)
            guard record(.purchase(.lifetime, offer: nil, user: 0), at: now, events: [ExpectedEvent(user: 0, .receiptValidated)]) else {
                return
            }
            // The same transaction from the same user: the same receipt, nothing new to tell.
            let restored = now.addingTimeInterval(Double(Int.random(in: 1...20, using: &random)) * 86_400)
            record(.restore(user: 0), at: restored, events: [])
        case .sharedAppleAccount:
            guard subscribe(.monthly, offer: nil) else { return }
            let other = now.addingTimeInterval(Double(Int.random(in: 1...20, using: &random)) * 3_600)
            // The second app user's receipt is valid, but the purchase stays the first user's.
            let events = [ExpectedEvent(user: 1, .receiptValidated), ExpectedEvent(user: 1, .purchaseConflict)]
            guard record(.restore(user: 1), at: other, events: events) else { return }
            renewals(.max)
        case .refundDeclined, .refundReversed, .proratedRefund, .familySharing, .downgrade, .autoRenewReenabled, .renewalExtended,
            .priceIncreaseAccepted, .priceIncreaseDeclined, .offerCode, .winBack:
            playMore(scenario, using: &random)
        }
    }

    /// The device buys `product` now: its first period begins.
    mutating func subscribe(_ product: ConformanceCatalogue.Product, offer: IntroOffer?) -> Bool {
        self.product = product
        periodEnd = now.addingTimeInterval(offer == .freeTrial ? Lifecycle.trialLength : Lifecycle.month)
        hold(product, until: periodEnd)
        let events = [ExpectedEvent(user: 0, .receiptValidated), ExpectedEvent(user: 0, .subscriptionStarted)]
        return record(.purchase(product, offer: offer, user: 0), at: now, events: events)
    }

    /// `count` renewals, each at the end of the period; false when the horizon came first. A
    /// subscription whose story ends without an expiry renews until the horizon (`.max`): left
    /// alone, Apple would renew it, and the truth must say so.
    @discardableResult
    mutating func renewals(_ count: Int) -> Bool {
        for _ in 0..<count {
            guard let end = periodEnd, let current = product else { return false }
            periodEnd = end.addingTimeInterval(Lifecycle.month)
            // A pending downgrade takes effect: receiptq states the new product, not a renewal.
            let next = renewsInto ?? current
            product = next
            renewsInto = nil
            hold(next, until: periodEnd)
            for member in members { hold(next, until: periodEnd, user: member) }
            let renewed: EventType = next == current ? .subscriptionRenewed : .subscriptionProductChanged
            let events = ([0] + members).map { ExpectedEvent(user: $0, renewed) }
            guard record(.renew, at: end, events: events) else { return false }
        }
        return true
    }
}
