import Foundation
import ReceiptCore
import ReceiptTesting

extension Story {
    /// The scenarios of issue 45's second round: refunds declined, reversed and prorated, Family
    /// Sharing and its revocation, a downgrade, auto-renew turned back on, a renewal extension,
    /// price increases consented to or not, an offer code, a win-back.
    mutating func playMore(_ scenario: Scenario, using random: inout SeededGenerator) {
        /// An instant `fraction` of the way into the current period.
        func into(_ fraction: ClosedRange<Double>) -> Date {
            now.addingTimeInterval(Double.random(in: fraction, using: &random) * periodEnd!.timeIntervalSince(now))
        }
        switch scenario {
        case .refundDeclined:
            guard subscribe(.monthly, offer: nil), renewals(Int.random(in: 0...2, using: &random)) else { return }
            // Apple says no: the period stays the customer's, nothing for the backend to do.
            guard record(.refundDeclined, at: into(0.1...0.9), events: []) else { return }
            renewals(.max)
        case .refundReversed:
            guard subscribe(.monthly, offer: nil), renewals(Int.random(in: 0...1, using: &random)) else { return }
            hold(nil, until: nil)
            guard record(.refund, at: into(0.1...0.4), events: [ExpectedEvent(user: 0, .subscriptionRefunded)]) else { return }
            // The refund taken back within the period: the period is the customer's again (receiptq
            // states a subscription back from revoked as started), and Apple renews it.
            hold(product, until: periodEnd)
            guard record(.refundReversed, at: into(0.2...0.8), events: [ExpectedEvent(user: 0, .subscriptionStarted)]) else { return }
            renewals(.max)
        case .proratedRefund:
            guard subscribe(.monthly, offer: nil), renewals(Int.random(in: 0...2, using: &random)) else { return }
            // Part of the period's price refunded: the purchase stands (Apple's status stays active),
            // the entitlement with it; receiptq records the refunded share, no event states it.
            let share = Int.random(in: 10...90, using: &random) * 1000
            guard record(.proratedRefund(percentageMilli: share), at: into(0.1...0.9), events: []) else { return }
            renewals(.max)
        case .familySharing:
            guard subscribe(.monthly, offer: nil) else { return }
            // The member's device presents a transaction of the member's own, ending with the organiser's period.
            members = [1]
            hold(product, until: periodEnd, user: 1)
            let shared = [ExpectedEvent(user: 1, .receiptValidated), ExpectedEvent(user: 1, .subscriptionStarted)]
            guard record(.familyShare(user: 1), at: into(0.1...0.6), events: shared),
                renewals(Int.random(in: 0...2, using: &random))
            else { return }
            // The organiser stops sharing (or the member leaves the family): only the member loses it.
            members = []
            hold(nil, until: nil, user: 1)
            guard record(.revoke(user: 1), at: into(0.1...0.9), events: [ExpectedEvent(user: 1, .subscriptionRevoked)]) else { return }
            renewals(.max)
        case .downgrade:
            guard subscribe(.premium, offer: nil), renewals(Int.random(in: 0...1, using: &random)) else { return }
            // Premium until the period's end; the renewal is monthly.
            renewsInto = .monthly
            let changed = [ExpectedEvent(user: 0, .subscriptionProductChanged)]
            guard record(.downgrade(to: .monthly), at: into(0.1...0.9), events: changed) else { return }
            renewals(.max)
        case .autoRenewReenabled:
            guard subscribe(.monthly, offer: nil), renewals(Int.random(in: 0...2, using: &random)) else { return }
            let changed = [ExpectedEvent(user: 0, .subscriptionAutoRenewChanged)]
            guard record(.autoRenewOff, at: into(0.1...0.5), events: changed) else { return }
            // Turned back on before the period ends: Apple renews as if nothing happened.
            guard record(.autoRenewOn, at: into(0.2...0.8), events: changed) else { return }
            renewals(.max)
        case .renewalExtended:
            guard subscribe(.monthly, offer: nil), renewals(Int.random(in: 0...2, using: &random)) else { return }
            let days = Int.random(in: 3...30, using: &random)
            let at = into(0.1...0.9)
            periodEnd = periodEnd!.addingTimeInterval(Double(days) * 86_400)
            hold(product, until: periodEnd)
            guard record(.extend(days: days), at: at, events: [ExpectedEvent(user: 0, .subscriptionExtended)]) else { return }
            renewals(.max)
        case .priceIncreaseAccepted:
            guard subscribe(.monthly, offer: nil), renewals(Int.random(in: 0...1, using: &random)) else { return }
            // Neither the announcement nor the consent changes what the customer holds (nor an event
            // receiptq has); the renewals charge the new price.
            guard record(.priceIncrease(accepted: false), at: into(0.1...0.4), events: []),
                record(.priceIncrease(accepted: true), at: into(0.2...0.8), events: [])
            else { return }
            renewals(.max)
        case .priceIncreaseDeclined:
            guard subscribe(.monthly, offer: nil), renewals(Int.random(in: 0...1, using: &random)) else { return }
            guard record(.priceIncrease(accepted: false), at: into(0.1...0.8), events: []) else { return }
            let end = periodEnd!
            hold(nil, until: nil)
            record(.expire(.priceIncrease), at: end, events: [ExpectedEvent(user: 0, .subscriptionExpired)])
        case .offerCode:
            guard subscribe(.monthly, offer: .offerCode) else { return }
            renewals(.max)
        case .winBack:
            guard subscribe(.monthly, offer: nil), renewals(Int.random(in: 0...1, using: &random)) else { return }
            guard record(.autoRenewOff, at: into(0.2...0.8), events: [ExpectedEvent(user: 0, .subscriptionAutoRenewChanged)]) else { return }
            let end = periodEnd!
            hold(nil, until: nil)
            guard record(.expire(.voluntary), at: end, events: [ExpectedEvent(user: 0, .subscriptionExpired)]) else { return }
            // Back after days or weeks: the same subscription (its original transaction), a new
            // period from the purchase, renewing again. receiptq states a new period of the same
            // product as a renewal, and auto-renew, off since the customer turned it off, on again.
            let back = end.addingTimeInterval(Double(Int.random(in: 3...30, using: &random)) * 86_400)
            periodEnd = back.addingTimeInterval(Lifecycle.month)
            hold(product, until: periodEnd)
            let events = [.receiptValidated, .subscriptionRenewed, .subscriptionAutoRenewChanged].map { ExpectedEvent(user: 0, $0) }
            guard record(.resubscribe(offer: .winBack), at: back, events: events) else { return }
            renewals(.max)
        default:
            break
        }
    }
}
