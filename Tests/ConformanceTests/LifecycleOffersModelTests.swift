import Conformance
import Foundation
import ReceiptCore
import Testing

/// The model's renewal extensions, price increases, offer codes and win-backs: the ground truth
/// each step writes.
@Suite("The lifecycle model's extensions, price increases and offers")
struct LifecycleOffersModelTests {
    static func timeline(_ scenario: Scenario) -> Timeline { LifecycleModelTests.timeline(scenario) }

    static func step(_ timeline: Timeline, where matches: (Action) -> Bool) throws -> Step {
        try #require(timeline.steps.first { matches($0.action) }, "\(timeline.scenario) lacks the step")
    }

    @Test("a renewal extension moves the expiry by its days, stated as extended; the next renewal is at the new end")
    func extended() throws {
        let timeline = Self.timeline(.renewalExtended)
        let extended = try Self.step(timeline) { if case .extend = $0 { true } else { false } }
        guard case .extend(let days) = extended.action else { return }
        let index = try #require(timeline.steps.firstIndex(of: extended))
        let before = try #require(timeline.steps[index - 1].holdings[0].first?.until)
        #expect(extended.holdings[0] == [HeldEntitlement(id: "pro", until: before.addingTimeInterval(Double(days) * 86_400))])
        #expect(extended.events == [ExpectedEvent(user: 0, .subscriptionExtended)])
        #expect(timeline.steps[index + 1].action == .renew)
        #expect(timeline.steps[index + 1].at == extended.holdings[0].first?.until)
    }

    @Test("a price increase consented to changes nothing the backend sees; renewals go on")
    func priceAccepted() throws {
        let timeline = Self.timeline(.priceIncreaseAccepted)
        let pending = try Self.step(timeline) { $0 == .priceIncrease(accepted: false) }
        let accepted = try Self.step(timeline) { $0 == .priceIncrease(accepted: true) }
        #expect(pending.at < accepted.at)
        #expect(pending.events.isEmpty && accepted.events.isEmpty)
        #expect(accepted.holdings == pending.holdings && pending.holdings[0].map(\.id) == ["pro"])
        #expect(timeline.steps.last?.action == .renew)
    }

    @Test("a price increase never consented to ends the subscription at the period's end")
    func priceDeclined() throws {
        let timeline = Self.timeline(.priceIncreaseDeclined)
        let pending = try Self.step(timeline) { $0 == .priceIncrease(accepted: false) }
        let expired = try #require(timeline.steps.last)
        #expect(expired.action == .expire(.priceIncrease))
        #expect(expired.at == pending.holdings[0].first?.until)
        #expect(expired.holdings[0].isEmpty)
        #expect(expired.events == [ExpectedEvent(user: 0, .subscriptionExpired)])
        #expect(Action.expire(.priceIncrease).description == "EXPIRED PRICE_INCREASE")
    }

    @Test("an offer code starts a month like any purchase, then renewals")
    func offerCode() throws {
        let timeline = Self.timeline(.offerCode)
        let bought = try #require(timeline.steps.first)
        #expect(bought.action == .purchase(.monthly, offer: .offerCode, user: 0))
        #expect(bought.holdings[0] == [HeldEntitlement(id: "pro", until: bought.at.addingTimeInterval(Lifecycle.month))])
        #expect(bought.events.map(\.type) == [.receiptValidated, .subscriptionStarted])
        #expect(timeline.steps.dropFirst().allSatisfy { $0.action == .renew })
    }

    @Test("a win-back: expired, then the same subscription bought again with the offer, renewing again")
    func winBack() throws {
        let timeline = Self.timeline(.winBack)
        let expired = try Self.step(timeline) { $0 == .expire(.voluntary) }
        let back = try Self.step(timeline) { $0 == .resubscribe(offer: .winBack) }
        #expect(back.action.isDevicePost)
        #expect(back.at > expired.at)
        #expect(timeline.truth(user: 0, at: back.at.addingTimeInterval(-1)).isEmpty, "nothing held while lapsed")
        #expect(back.holdings[0] == [HeldEntitlement(id: "pro", until: back.at.addingTimeInterval(Lifecycle.month))])
        #expect(back.events.map(\.type) == [.receiptValidated, .subscriptionRenewed, .subscriptionAutoRenewChanged])
        #expect(timeline.steps.last?.action == .renew)
    }
}
