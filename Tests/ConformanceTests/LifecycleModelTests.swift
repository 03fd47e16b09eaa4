import Conformance
import Foundation
import ReceiptCore
import Testing

@Suite("The conformance suite's lifecycle model")
struct LifecycleModelTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)
    static let catalogue = ConformanceCatalogue(bundleID: "com.example.cf")

    static func generator(days: Int = 365, seed: UInt64 = 7) -> LifecycleGenerator {
        LifecycleGenerator(catalogue: catalogue, start: start, days: days, seed: seed)
    }

    static func timeline(_ scenario: Scenario, days: Int = 365) -> Timeline {
        generator(days: days).timelines(customers: Scenario.allCases.count).first { $0.scenario == scenario }!
    }

    @Test("the same seed gives the same timelines; another seed other moments")
    func seeded() {
        #expect(Self.generator().timelines(customers: 30) == Self.generator().timelines(customers: 30))
        #expect(Self.generator().timelines(customers: 30) != Self.generator(seed: 8).timelines(customers: 30))
        // One customer's story does not depend on how many others there are.
        #expect(Self.generator().timelines(customers: 3)[2] == Self.generator().timelines(customers: 40)[2])
    }

    @Test("every scenario is dealt, steps are in time order and inside the run")
    func shape() {
        let generator = Self.generator(days: 90)
        let timelines = generator.timelines(customers: 200)
        #expect(Set(timelines.map(\.scenario)) == Set(Scenario.allCases))
        for timeline in timelines {
            #expect(!timeline.steps.isEmpty)
            #expect(timeline.steps.map(\.at) == timeline.steps.map(\.at).sorted())
            #expect(timeline.steps.allSatisfy { $0.at >= Self.start && $0.at < generator.horizon })
            #expect(timeline.steps.first?.action.isDevicePost == true, "a customer starts by buying")
        }
    }

    @Test("a free trial lasts a week, renewals extend by a month, auto-renew off ends it at the period's end")
    func trial() throws {
        let timeline = Self.timeline(.trialVoluntaryExpiry)
        let bought = try #require(timeline.steps.first)
        #expect(bought.action == .purchase(.monthly, offer: .freeTrial, user: 0))
        #expect(bought.holdings[0] == [HeldEntitlement(id: "pro", until: bought.at.addingTimeInterval(Lifecycle.trialLength))])
        #expect(bought.events == [ExpectedEvent(user: 0, .receiptValidated), ExpectedEvent(user: 0, .subscriptionStarted)])
        let renewal = timeline.steps[1]
        #expect(renewal.action == .renew)
        #expect(renewal.at == bought.at.addingTimeInterval(Lifecycle.trialLength))
        #expect(renewal.holdings[0] == [HeldEntitlement(id: "pro", until: renewal.at.addingTimeInterval(Lifecycle.month))])
        let expiry = try #require(timeline.steps.last)
        #expect(expiry.action == .expire(.voluntary))
        #expect(expiry.holdings[0].isEmpty)
        #expect(timeline.steps.dropLast().last?.action == .autoRenewOff)
        // Between auto-renew off and the expiry the customer still has the period paid for.
        let off = timeline.steps[timeline.steps.count - 2]
        #expect(timeline.truth(user: 0, at: off.at.addingTimeInterval(60)).map(\.id) == ["pro"])
        #expect(timeline.truth(user: 0, at: expiry.at).isEmpty)
        #expect(timeline.expectedEvents(user: 0).suffix(2) == [.subscriptionAutoRenewChanged, .subscriptionExpired])
    }

    @Test("billing retry without grace entitles nothing; Apple expires it after the retry period")
    func involuntary() throws {
        let timeline = Self.timeline(.introInvoluntaryExpiry)
        #expect(timeline.steps.first?.action == .purchase(.monthly, offer: .payUpFront, user: 0))
        let failed = try #require(timeline.steps.first { $0.action == .failToRenew(grace: false) })
        #expect(failed.holdings[0].isEmpty)
        #expect(failed.events == [ExpectedEvent(user: 0, .subscriptionBillingIssue)])
        let expired = try #require(timeline.steps.last)
        #expect(expired.action == .expire(.billingRetry))
        #expect(expired.at == failed.at.addingTimeInterval(Lifecycle.billingRetry))
    }

    @Test("grace keeps the customer entitled until grace ends; recovery starts a new month from the charge")
    func grace() throws {
        let timeline = Self.timeline(.graceRecovery)
        let failed = try #require(timeline.steps.first { $0.action == .failToRenew(grace: true) })
        #expect(failed.holdings[0] == [HeldEntitlement(id: "pro", until: failed.at.addingTimeInterval(Lifecycle.gracePeriod))])
        #expect(failed.events.map(\.type) == [.subscriptionBillingIssue, .subscriptionGracePeriodStarted])
        let recovered = try #require(timeline.steps.first { $0.action == .recover })
        #expect(recovered.at > failed.at && recovered.at < failed.at.addingTimeInterval(Lifecycle.gracePeriod))
        #expect(recovered.holdings[0] == [HeldEntitlement(id: "pro", until: recovered.at.addingTimeInterval(Lifecycle.month))])
        #expect(recovered.events.map(\.type) == [.subscriptionBillingRecovered, .subscriptionRenewed])
    }

    @Test("a refund ends the entitlement at once; an upgrade adds premium and restarts the period")
    func refundAndUpgrade() throws {
        let refunded = try #require(Self.timeline(.refund).steps.last)
        #expect(refunded.action == .refund)
        #expect(refunded.holdings[0].isEmpty)
        #expect(refunded.events == [ExpectedEvent(user: 0, .subscriptionRefunded)])
        let upgrade = try #require(Self.timeline(.upgrade).steps.first { $0.action == .upgrade(to: .premium) })
        let until = upgrade.at.addingTimeInterval(Lifecycle.month)
        #expect(upgrade.holdings[0] == [HeldEntitlement(id: "premium", until: until), HeldEntitlement(id: "pro", until: until)])
        #expect(upgrade.events == [ExpectedEvent(user: 0, .subscriptionUpgraded)])
    }

    @Test("a consumable entitles nothing, a non-consumable for good, restored on a second device without a new event but its receipt's")
    func oneTimePurchases() throws {
        let coins = try #require(Self.timeline(.consumable).steps.first)
        #expect(coins.holdings[0].isEmpty)
        let lifetime = Self.timeline(.nonConsumable)
        #expect(lifetime.truth(user: 0, at: Self.start.addingTimeInterval(400 * 86_400)) == [HeldEntitlement(id: "no_ads", until: nil)])
        let restored = Self.timeline(.restoreSecondDevice)
        #expect(restored.steps.map(\.action) == [.purchase(.lifetime, offer: nil, user: 0), .restore(user: 0)])
        #expect(restored.steps[1].holdings == restored.steps[0].holdings)
        #expect(restored.expectedEvents(user: 0) == [.receiptValidated], "the same transaction from the same user is the same receipt")
    }

    @Test("two app users on one Apple account: the first keeps the subscription, the second hears of the conflict")
    func sharedAccount() throws {
        let timeline = Self.timeline(.sharedAppleAccount)
        #expect(timeline.users.count == 2)
        let other = try #require(timeline.steps.first { $0.action == .restore(user: 1) })
        #expect(other.holdings[1].isEmpty)
        #expect(other.holdings[0].map(\.id) == ["pro"])
        #expect(timeline.expectedEvents(user: 1) == [.receiptValidated, .purchaseConflict])
    }

    @Test("a subscription whose story ends without an expiry renews until the horizon")
    func renewsToHorizon() throws {
        let generator = Self.generator(days: 200)
        let renewing: [Scenario] = [
            .graceRecovery, .upgrade, .sharedAppleAccount, .refundDeclined, .refundReversed, .proratedRefund, .familySharing, .downgrade,
            .autoRenewReenabled, .renewalExtended, .priceIncreaseAccepted, .offerCode, .winBack,
        ]
        for scenario in renewing {
            let timeline = generator.timelines(customers: Scenario.allCases.count).first { $0.scenario == scenario }!
            let last = try #require(timeline.steps.last)
            let until = try #require(last.holdings[0].compactMap(\.until).max())
            #expect(until >= generator.horizon, "\(scenario): held until \(until), the run ends \(generator.horizon)")
        }
    }

    @Test("a short run cuts timelines at its horizon")
    func horizon() {
        let generator = Self.generator(days: 3)
        for timeline in generator.timelines(customers: 40) {
            #expect(timeline.steps.allSatisfy { $0.at < generator.horizon })
            #expect(!timeline.steps.contains { $0.action == .renew }, "no month passes in three days")
        }
    }

    @Test("the truth between steps drops what ended: a period not renewed by its end is not held")
    func truthBetweenSteps() throws {
        let timeline = Self.timeline(.refund)
        let bought = try #require(timeline.steps.first)
        let end = try #require(bought.holdings[0].first?.until)
        #expect(timeline.truth(user: 0, at: end.addingTimeInterval(-1)).map(\.id) == ["pro"])
        #expect(timeline.truth(user: 0, at: bought.at.addingTimeInterval(-1)).isEmpty)
        #expect(timeline.narrative.contains("customer \(timeline.customer) (refund)"))
    }
}
