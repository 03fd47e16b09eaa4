import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

@Suite("Notification-aware re-polls: the safety net (mock clock)")
struct RepollSafetyNetTests {
    static let day: TimeInterval = 86_400
    static let start = Date(timeIntervalSince1970: 1_800_000_000)
    let net = RepollSafetyNet(freshWindow: .seconds(6 * 3600), grace: .seconds(86_400))

    func candidate(
        _ status: SubscriptionStatus = .active, expires: Date? = start.addingTimeInterval(day), notified: Date? = start,
        polled: Date? = nil, app: Date? = start
    ) -> RepollSafetyNet.Candidate {
        RepollSafetyNet.Candidate(
            status: status, expiresAt: expires, period: 30 * Self.day, notifiedAt: notified, lastPolledAt: polled, appNotifiedAt: app)
    }

    @Test("Covered (a notification since the last poll, the app's arriving): no poll until the expected renewal plus the grace")
    func covered() {
        let now = Self.start.addingTimeInterval(3600)
        let expires = Self.start.addingTimeInterval(Self.day)
        #expect(net.decide(candidate(expires: expires, polled: Self.start.addingTimeInterval(-60)), at: now) == .skip(until: expires + Self.day))
        // The renewal's notification never came: the safety net polls once the grace has passed.
        let late = expires.addingTimeInterval(Self.day)
        #expect(net.decide(candidate(expires: expires, app: late.addingTimeInterval(-60)), at: late) == .poll(.safetyNet))
    }

    @Test("Today's schedule: no notification since the last poll, none ever, or an app whose notifications stopped")
    func notCovered() {
        let now = Self.start.addingTimeInterval(3600)
        #expect(net.decide(candidate(polled: Self.start.addingTimeInterval(1)), at: now) == .poll(.scheduled))
        #expect(net.decide(candidate(notified: nil), at: now) == .poll(.scheduled))
        #expect(net.decide(candidate(app: nil), at: now) == .poll(.scheduled))
        // The app's last notification is older than the window: notifications stopped.
        let stale = Self.start.addingTimeInterval(6 * 3600 + 1)
        #expect(net.decide(candidate(), at: stale) == .poll(.scheduled))
        #expect(net.decide(candidate(), at: Self.start.addingTimeInterval(6 * 3600)) != .poll(.scheduled))
        // A zero window turns the safety net off.
        #expect(RepollSafetyNet(freshWindow: .zero).decide(candidate(), at: Self.start) == .poll(.scheduled))
    }

    @Test("Ended subscriptions keep their single final check; billing retry is checked once a period")
    func statuses() {
        let now = Self.start.addingTimeInterval(60)
        for status in [SubscriptionStatus.expired, .revoked, .upgraded] {
            #expect(net.decide(candidate(status), at: now) == .poll(.scheduled))
        }
        #expect(net.decide(candidate(.billingRetry), at: now) == .skip(until: Self.start.addingTimeInterval(31 * Self.day)))
        let grace = RepollSafetyNet.Candidate(
            status: .grace, expiresAt: Self.start, gracePeriodExpiresAt: Self.start.addingTimeInterval(16 * Self.day),
            notifiedAt: Self.start, lastPolledAt: nil, appNotifiedAt: Self.start)
        #expect(net.decide(grace, at: now) == .skip(until: Self.start.addingTimeInterval(17 * Self.day)))
    }

    // MARK: - A simulated month

    /// One simulated month of one app's monthly subscriptions, driven by the real ``RepollPolicy``
    /// (what the worker plans) and ``RepollSafetyNet`` (what the scheduler's claim decides) on a
    /// fake clock. Apple renews each subscription at its expiry (a share churn instead); with
    /// notifications, each renewal or expiry is notified a few minutes later, and a share is lost.
    struct Month {
        struct Counts {
            var made = 0
            var skipped = 0
            /// Re-polls made in each second (one call to each endpoint a poll uses).
            var perSecond: [Int: Int] = [:]
            var peakPerSecond: Int { perSecond.values.max() ?? 0 }
        }

        /// The subscription as the `subscriptions` row holds it.
        struct Row {
            var state: SubscriptionState
            var nextPollAt: Date?
            var notifiedAt: Date?
            var lastPolledAt: Date?
            var version = 0
        }

        enum Event {
            case poll(Int, version: Int)
            case notification(Int)
        }

        let count: Int
        let notifications: Bool
        let start = RepollSafetyNetTests.start
        let length: TimeInterval = 30 * RepollSafetyNetTests.day
        let period: TimeInterval = 30 * RepollSafetyNetTests.day
        let churn = 0.03
        let lost = 0.02
        let policy = RepollPolicy()
        let net = RepollSafetyNet()

        /// Runs the month. Events go into minute buckets (a calendar queue: a heap of 300,000 events
        /// is slow in a debug build); one planned inside the minute being run waits for the next.
        func run() -> Counts {
            var rng = SeededGenerator(seed: 42)
            let minutes = Int(length / 60) + 1
            var buckets = [[(Date, Event)]](repeating: [], count: minutes)
            var current = 0
            func schedule(_ date: Date, _ event: Event) {
                let minute = max(current + 1, Int(date.timeIntervalSince(start) / 60))
                if minute < minutes { buckets[minute].append((date, event)) }
            }
            var firstExpiry: [Date] = []
            var churns: [Bool] = []
            var rows: [Row] = []
            var appNotifiedAt: Date? = notifications ? start : nil
            for index in 0..<count {
                // Bought over the last month: expiries spread over this one.
                let expires = start.addingTimeInterval(Double.random(in: 60..<period, using: &rng))
                firstExpiry.append(expires)
                churns.append(Double.random(in: 0..<1, using: &rng) < churn)
                let state = appleState(index, expires, churned: false, at: start)
                let next = policy.nextPoll(for: state, at: start, using: &rng)
                rows.append(Row(state: state, nextPollAt: next, notifiedAt: notifications ? state.purchasedAt : nil))
                if let next { schedule(next, .poll(index, version: 0)) }
                if notifications, Double.random(in: 0..<1, using: &rng) >= lost {
                    schedule(expires.addingTimeInterval(Double.random(in: 1...300, using: &rng)), .notification(index))
                }
            }
            var counts = Counts()
            while current < minutes {
                let events = buckets[current].sorted { $0.0 < $1.0 }
                buckets[current] = []
                for (now, event) in events {
                    switch event {
                    case .notification(let index):
                        // DID_RENEW or EXPIRED: the worker stores Apple's signed state and plans the next poll.
                        let state = appleState(index, firstExpiry[index], churned: churns[index], at: now)
                        rows[index].state = state
                        rows[index].notifiedAt = now
                        appNotifiedAt = now
                        plan(index, at: now, rows: &rows, schedule: schedule, rng: &rng)
                    case .poll(let index, let version):
                        guard rows[index].version == version, let due = rows[index].nextPollAt else { continue }
                        let row = rows[index]
                        let candidate = RepollSafetyNet.Candidate(
                            status: row.state.status, expiresAt: row.state.expiresAt, gracePeriodExpiresAt: row.state.gracePeriodExpiresAt,
                            period: row.state.period, notifiedAt: row.notifiedAt, lastPolledAt: row.lastPolledAt, appNotifiedAt: appNotifiedAt)
                        switch net.decide(candidate, at: now) {
                        case .skip(let until):
                            counts.skipped += 1
                            rows[index].version += 1
                            rows[index].nextPollAt = until
                            schedule(until, .poll(index, version: rows[index].version))
                        case .poll:
                            precondition(due <= now)
                            counts.made += 1
                            counts.perSecond[Int(now.timeIntervalSince(start)), default: 0] += 1
                            rows[index].state = appleState(index, firstExpiry[index], churned: churns[index], at: now)
                            rows[index].lastPolledAt = now
                            plan(index, at: now, rows: &rows, schedule: schedule, rng: &rng)
                        }
                    }
                }
                current += 1
            }
            return counts
        }

        /// The worker's plan after storing a state: the policy's next poll.
        func plan(
            _ index: Int, at now: Date, rows: inout [Row], schedule: (Date, Event) -> Void, rng: inout SeededGenerator
        ) {
            rows[index].version += 1
            rows[index].nextPollAt = policy.nextPoll(for: rows[index].state, at: now, using: &rng)
            if let next = rows[index].nextPollAt { schedule(next, .poll(index, version: rows[index].version)) }
        }

        /// What Apple answers about subscription `index` at `now`: renewed at its first expiry, or
        /// expired then when it churns.
        func appleState(_ index: Int, _ expires: Date, churned: Bool, at now: Date) -> SubscriptionState {
            let renewed = now >= expires
            let end = renewed && !churned ? expires.addingTimeInterval(period) : expires
            return SubscriptionState(
                originalTransactionID: "\(index)", productID: "monthly", status: renewed && churned ? .expired : .active,
                expiresAt: end, purchasedAt: end.addingTimeInterval(-period), latestTransactionID: "\(index)", observedAt: now)
        }
    }

    @Test("A month of 100,000 subscriptions: with notifications flowing, at most 10 % of the re-polls, never over 50 a second")
    func simulatedMonth() {
        let without = Month(count: 100_000, notifications: false).run()
        let with = Month(count: 100_000, notifications: true).run()
        let ratio = Double(with.made) / Double(max(1, without.made))
        print(
            "simulated month, 100,000 subscriptions: re-polls without notifications \(without.made) (peak \(without.peakPerSecond)/s), "
                + "with notifications \(with.made) (peak \(with.peakPerSecond)/s, skipped \(with.skipped)), ratio \(ratio)")
        // About two polls a subscription without (before the expiry, then just after it).
        #expect(without.made >= 180_000)
        #expect(without.skipped == 0)
        #expect(ratio <= 0.10)
        // The lost renewals' safety nets and the churned subscriptions' final checks remain.
        #expect(with.made > 0)
        #expect(without.peakPerSecond <= 50 && with.peakPerSecond <= 50)
    }
}
