import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

@Suite("Re-poll planner (mock clock)")
struct RepollPolicyTests {
    static let day: TimeInterval = 86_400
    let policy = RepollPolicy()

    func state(
        _ status: SubscriptionStatus, purchased: Date, expires: Date, grace: Date? = nil, revoked: Date? = nil
    ) -> SubscriptionState {
        SubscriptionState(
            originalTransactionID: "1", productID: "p", status: status, expiresAt: expires, purchasedAt: purchased,
            isInBillingRetry: status == .billingRetry || status == .grace, gracePeriodExpiresAt: grace, latestTransactionID: "1",
            revokedAt: revoked, observedAt: purchased)
    }

    @Test("Monthly: first shortly before expiry (a day's lead, jittered earlier), then just after it")
    func monthly() throws {
        let clock = MockClock(start: Date(timeIntervalSince1970: 1_800_000_000))
        var rng = SeededGenerator(seed: 1)
        let expires = clock.now.addingTimeInterval(30 * Self.day)
        let active = state(.active, purchased: clock.now, expires: expires)
        let before = try #require(policy.nextPoll(for: active, at: clock.now, using: &rng))
        // 5 % of 30 days is 1.5 days, capped at 1 day; the jitter adds up to a quarter of it.
        #expect(before <= expires.addingTimeInterval(-Self.day))
        #expect(before >= expires.addingTimeInterval(-1.25 * Self.day))

        // The poll at that time finds the same expiry: next is just after it (the renewal).
        clock.advance(to: before)
        let after = try #require(policy.nextPoll(for: active, at: clock.now, using: &rng))
        #expect(after > expires)
        #expect(after <= expires.addingTimeInterval(1800 * 1.25))

        // It renewed: the cycle starts again before the new expiry.
        clock.advance(to: after)
        let renewed = state(.active, purchased: expires, expires: expires.addingTimeInterval(30 * Self.day))
        let next = try #require(policy.nextPoll(for: renewed, at: clock.now, using: &rng))
        #expect(next > expires.addingTimeInterval(28 * Self.day))
        #expect(next < expires.addingTimeInterval(29 * Self.day))
    }

    @Test("Sandbox time: a five-minute 'month' is polled seconds before and after, never hours")
    func sandboxScale() throws {
        var rng = SeededGenerator(seed: 2)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let expires = now.addingTimeInterval(300)
        let active = state(.active, purchased: now, expires: expires)
        let before = try #require(policy.nextPoll(for: active, at: now, using: &rng))
        #expect(expires.timeIntervalSince(before) >= 15)
        #expect(expires.timeIntervalSince(before) <= 15 * 1.25 + 0.001)
        let after = try #require(policy.nextPoll(for: active, at: expires.addingTimeInterval(-5), using: &rng))
        #expect(after.timeIntervalSince(expires) >= 5)
        #expect(after.timeIntervalSince(expires) <= 10)
        // Trouble is polled once a period, not once a day.
        let retry = state(.billingRetry, purchased: now.addingTimeInterval(-600), expires: now.addingTimeInterval(-300))
        let next = try #require(policy.nextPoll(for: retry, at: now, using: &rng))
        #expect(next.timeIntervalSince(now) >= 300)
        #expect(next.timeIntervalSince(now) <= 375)
    }

    @Test("A thousand subscriptions renewing in the same minute are spread over hours, not polled together")
    func jitterSpreads() {
        var rng = SeededGenerator(seed: 3)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let polls = (0..<1000).compactMap { index -> Date? in
            let purchased = now.addingTimeInterval(Double(index % 60))
            let active = state(.active, purchased: purchased, expires: purchased.addingTimeInterval(30 * Self.day))
            return policy.nextPoll(for: active, at: now, using: &rng)
        }
        #expect(polls.count == 1000)
        let seconds = Set(polls.map { Int($0.timeIntervalSince1970) })
        #expect(seconds.count > 900)
        let spread = (polls.max() ?? now).timeIntervalSince(polls.min() ?? now)
        #expect(spread > 4 * 3600)
        #expect(spread < 6.1 * 3600)
    }

    @Test("Grace and billing retry: daily, and right after the grace period ends if sooner")
    func trouble() throws {
        var rng = SeededGenerator(seed: 4)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let lapsed = now.addingTimeInterval(-Self.day)
        let retry = state(.billingRetry, purchased: lapsed.addingTimeInterval(-30 * Self.day), expires: lapsed)
        let next = try #require(policy.nextPoll(for: retry, at: now, using: &rng))
        #expect(next.timeIntervalSince(now) >= Self.day)
        #expect(next.timeIntervalSince(now) <= 1.25 * Self.day)

        let graceEnd = now.addingTimeInterval(3 * 3600)
        let grace = state(.grace, purchased: lapsed.addingTimeInterval(-30 * Self.day), expires: lapsed, grace: graceEnd)
        let graceNext = try #require(policy.nextPoll(for: grace, at: now, using: &rng))
        #expect(graceNext > graceEnd)
        #expect(graceNext <= graceEnd.addingTimeInterval(1800 * 1.25))
    }

    @Test("Expired, revoked, upgraded: one final check, then no more polls", arguments: [SubscriptionStatus.expired, .revoked, .upgraded])
    func finalCheck(_ status: SubscriptionStatus) throws {
        let clock = MockClock(start: Date(timeIntervalSince1970: 1_800_000_000))
        var rng = SeededGenerator(seed: 5)
        let end = clock.now.addingTimeInterval(-60)
        let ended = state(
            status, purchased: end.addingTimeInterval(-30 * Self.day), expires: end, revoked: status == .expired ? nil : end)
        let final = try #require(policy.nextPoll(for: ended, at: clock.now, using: &rng))
        #expect(final >= end.addingTimeInterval(Self.day))
        clock.advance(to: final)
        #expect(policy.nextPoll(for: ended, at: clock.now, using: &rng) == nil)
        // A receipt whose subscription ended long ago is never polled at all.
        #expect(policy.nextPoll(for: ended, at: end.addingTimeInterval(90 * Self.day), using: &rng) == nil)
    }

    @Test("Never sooner than the minimum delay, whatever the dates")
    func neverSpins() throws {
        var rng = SeededGenerator(seed: 6)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let almost = state(.active, purchased: now.addingTimeInterval(-30 * Self.day), expires: now.addingTimeInterval(0.5))
        let next = try #require(policy.nextPoll(for: almost, at: now, using: &rng))
        #expect(next.timeIntervalSince(now) >= 5)
        let odd = SubscriptionState(
            originalTransactionID: "1", productID: "p", status: .active, expiresAt: nil, latestTransactionID: "1", observedAt: now)
        #expect(try #require(policy.nextPoll(for: odd, at: now, using: &rng)).timeIntervalSince(now) >= 5)
    }

    @Test("The same seed gives the same plan: the planner is a pure function")
    func deterministic() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let active = state(.active, purchased: now, expires: now.addingTimeInterval(7 * Self.day))
        var first = SeededGenerator(seed: 9)
        var second = SeededGenerator(seed: 9)
        #expect(policy.nextPoll(for: active, at: now, using: &first) == policy.nextPoll(for: active, at: now, using: &second))
    }
}
