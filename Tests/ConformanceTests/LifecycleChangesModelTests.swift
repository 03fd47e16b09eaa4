import Conformance
import Foundation
import ReceiptCore
import Testing

/// The model's refunds declined, reversed and prorated, Family Sharing, downgrades and auto-renew
/// turned back on: the ground truth each step writes.
@Suite("The lifecycle model's refund outcomes, Family Sharing and renewal changes")
struct LifecycleChangesModelTests {
    static func timeline(_ scenario: Scenario) -> Timeline { LifecycleModelTests.timeline(scenario) }

    static func step(_ timeline: Timeline, _ action: Action) throws -> Step {
        try #require(timeline.steps.first { $0.action == action }, "\(timeline.scenario) has no \(action)")
    }

    /// The step before `step` in `timeline`.
    static func before(_ step: Step, in timeline: Timeline) throws -> Step {
        let index = try #require(timeline.steps.firstIndex(of: step))
        return timeline.steps[index - 1]
    }

    @Test("a declined refund changes nothing and tells nothing; renewals go on")
    func declined() throws {
        let timeline = Self.timeline(.refundDeclined)
        let declined = try Self.step(timeline, .refundDeclined)
        #expect(declined.events.isEmpty)
        #expect(declined.holdings == (try Self.before(declined, in: timeline)).holdings)
        #expect(timeline.steps.last?.action == .renew)
    }

    @Test("a reversed refund gives the period back until its end, stated as started again; renewals go on")
    func reversed() throws {
        let timeline = Self.timeline(.refundReversed)
        let refunded = try Self.step(timeline, .refund)
        let paid = try #require((try Self.before(refunded, in: timeline)).holdings[0].first)
        #expect(refunded.holdings[0].isEmpty)
        #expect(refunded.events == [ExpectedEvent(user: 0, .subscriptionRefunded)])
        let reversed = try Self.step(timeline, .refundReversed)
        #expect(reversed.at > refunded.at && reversed.at < paid.until!)
        #expect(reversed.holdings[0] == [paid])
        #expect(reversed.events == [ExpectedEvent(user: 0, .subscriptionStarted)])
        #expect(timeline.steps.last?.action == .renew)
    }

    @Test("a prorated refund leaves the subscription standing, without an event")
    func prorated() throws {
        let timeline = Self.timeline(.proratedRefund)
        let step = try #require(
            timeline.steps.first {
                if case .proratedRefund(let share) = $0.action { return (10_000...90_000).contains(share) }
                return false
            })
        #expect(step.events.isEmpty)
        #expect(step.holdings == (try Self.before(step, in: timeline)).holdings)
        #expect(step.holdings[0].map(\.id) == ["pro"])
    }

    @Test("a family member holds the organiser's subscription until its period's end, renews with it, and alone loses it when sharing stops")
    func familySharing() throws {
        let timeline = Self.timeline(.familySharing)
        #expect(timeline.users.count == 2)
        let shared = try Self.step(timeline, .familyShare(user: 1))
        #expect(shared.action.isDevicePost)
        #expect(shared.holdings[1] == shared.holdings[0], "the member holds what the organiser holds, until the same end")
        #expect(shared.events == [ExpectedEvent(user: 1, .receiptValidated), ExpectedEvent(user: 1, .subscriptionStarted)])
        let revoked = try Self.step(timeline, .revoke(user: 1))
        #expect(revoked.holdings[1].isEmpty)
        #expect(revoked.holdings[0].map(\.id) == ["pro"])
        #expect(revoked.events == [ExpectedEvent(user: 1, .subscriptionRevoked)])
        for renewal in timeline.steps where renewal.action == .renew {
            let users = renewal.at < revoked.at ? [0, 1] : [0]
            #expect(renewal.events == users.map { ExpectedEvent(user: $0, .subscriptionRenewed) })
        }
        let member = timeline.expectedEvents(user: 1)
        #expect(member.first == .receiptValidated && member.last == .subscriptionRevoked)
    }

    @Test("a downgrade keeps premium until the period's end; the renewal is monthly, stated as a product change")
    func downgrade() throws {
        let timeline = Self.timeline(.downgrade)
        #expect(timeline.steps.first?.action == .purchase(.premium, offer: nil, user: 0))
        let chosen = try Self.step(timeline, .downgrade(to: .monthly))
        #expect(chosen.holdings[0].map(\.id) == ["premium", "pro"])
        #expect(chosen.events == [ExpectedEvent(user: 0, .subscriptionProductChanged)])
        let end = try #require(chosen.holdings[0].first?.until)
        let renewal = try #require(timeline.steps.first { $0.action == .renew && $0.at >= chosen.at })
        #expect(renewal.at == end)
        #expect(renewal.holdings[0] == [HeldEntitlement(id: "pro", until: end.addingTimeInterval(Lifecycle.month))])
        #expect(renewal.events == [ExpectedEvent(user: 0, .subscriptionProductChanged)])
        let next = try #require(timeline.steps.first { $0.action == .renew && $0.at > renewal.at })
        #expect(next.events == [ExpectedEvent(user: 0, .subscriptionRenewed)])
    }

    @Test("auto-renew turned off then on within a period: the customer keeps renewing")
    func autoRenewBackOn() throws {
        let timeline = Self.timeline(.autoRenewReenabled)
        let off = try Self.step(timeline, .autoRenewOff)
        let on = try Self.step(timeline, .autoRenewOn)
        #expect(on.at > off.at && on.at < off.holdings[0].first!.until!)
        #expect(on.events == [ExpectedEvent(user: 0, .subscriptionAutoRenewChanged)])
        let renewal = try #require(timeline.steps.first { $0.action == .renew && $0.at > on.at })
        #expect(renewal.at == off.holdings[0].first?.until)
    }
}
