import Foundation

/// Whether a due re-poll is made or skipped because Apple's Server Notifications V2 already keep
/// the subscription up to date, as a pure function of what is stored and the time.
///
/// A subscription is **covered** when a V2 notification was applied to it after its last poll and
/// its app's notifications are arriving (the last one, in the subscription's environment, within
/// ``freshWindow``). A covered subscription is not polled on ``RepollPolicy``'s schedule: it is
/// polled only as a safety net, at most once per renewal period, ``grace`` after the renewal it
/// expects (a renewal's `DID_RENEW` moves the expiry, and so the safety net, a period on). Anything
/// else — no notification since the last poll, an app whose notifications stopped — is polled on
/// today's schedule exactly, and so is an ended subscription's single final check.
public struct RepollSafetyNet: Sendable, Equatable {
    /// How recent an app's last V2 notification must be for its notifications to count as arriving
    /// (default 6 h). Zero turns the safety net off: every subscription keeps ``RepollPolicy``'s schedule.
    public var freshWindow: Duration
    /// How long after the expected renewal a covered subscription is polled (default 1 day: Apple
    /// retries a notification it could not deliver for hours before giving up).
    public var grace: Duration

    /// Creates the rule; every value has a production default.
    public init(freshWindow: Duration = .seconds(6 * 3600), grace: Duration = .seconds(86_400)) {
        self.freshWindow = max(.zero, freshWindow)
        self.grace = max(.zero, grace)
    }

    /// What the decision reads of a due subscription.
    public struct Candidate: Sendable, Equatable {
        public var status: SubscriptionStatus
        public var expiresAt: Date?
        public var gracePeriodExpiresAt: Date?
        /// The latest period's length, when known (see ``SubscriptionState/period``).
        public var period: TimeInterval?
        /// When the last V2 notification was applied to the subscription.
        public var notifiedAt: Date?
        /// When the last re-poll's answer was stored.
        public var lastPolledAt: Date?
        /// When the app's last V2 notification in the subscription's environment was received.
        public var appNotifiedAt: Date?

        /// Creates a candidate.
        public init(
            status: SubscriptionStatus, expiresAt: Date?, gracePeriodExpiresAt: Date? = nil, period: TimeInterval? = nil,
            notifiedAt: Date?, lastPolledAt: Date?, appNotifiedAt: Date?
        ) {
            self.status = status
            self.expiresAt = expiresAt
            self.gracePeriodExpiresAt = gracePeriodExpiresAt
            self.period = period
            self.notifiedAt = notifiedAt
            self.lastPolledAt = lastPolledAt
            self.appNotifiedAt = appNotifiedAt
        }
    }

    /// The verdict on one due subscription.
    public enum Decision: Sendable, Equatable {
        /// Poll it now.
        case poll(Reason)
        /// Do not poll it now: notifications cover it until this time (its safety net).
        case skip(until: Date)
    }

    /// Why a poll is made.
    public enum Reason: String, Sendable, Equatable {
        /// ``RepollPolicy``'s schedule: no notification covers the subscription.
        case scheduled
        /// The safety net of a covered subscription: its expected renewal plus the grace has passed.
        case safetyNet = "safety_net"
    }

    /// The oldest app notification that still counts as arriving at `now`.
    public func freshSince(_ now: Date) -> Date { now.addingTimeInterval(-freshWindow.seconds) }

    /// Whether an app whose last V2 notification came at `appNotifiedAt` has notifications arriving at `now`.
    public func isArriving(_ appNotifiedAt: Date?, at now: Date) -> Bool {
        guard freshWindow > .zero, let appNotifiedAt else { return false }
        return appNotifiedAt >= freshSince(now)
    }

    /// Whether notifications cover `candidate` at `now`.
    public func covers(_ candidate: Candidate, at now: Date) -> Bool {
        guard let notifiedAt = candidate.notifiedAt, isArriving(candidate.appNotifiedAt, at: now) else { return false }
        return candidate.lastPolledAt.map { notifiedAt > $0 } ?? true
    }

    /// When a covered subscription's safety-net poll is due, or nil when it keeps today's schedule
    /// (an ended one: its final check is already a single poll).
    public func safetyNetAt(_ candidate: Candidate) -> Date? {
        let period = min(max(candidate.period ?? RepollPolicy.defaultPeriod, 60), 400 * 86_400)
        let anchor: Date?
        switch candidate.status {
        case .active:
            anchor = candidate.expiresAt ?? candidate.notifiedAt?.addingTimeInterval(period)
        case .grace:
            anchor = candidate.gracePeriodExpiresAt ?? candidate.expiresAt ?? candidate.notifiedAt?.addingTimeInterval(period)
        case .billingRetry:
            // Apple retries the charge for weeks and says how it ends (DID_RENEW or EXPIRED): once a period.
            anchor = candidate.notifiedAt?.addingTimeInterval(period)
        case .expired, .revoked, .upgraded:
            anchor = nil
        }
        return anchor?.addingTimeInterval(grace.seconds)
    }

    /// Whether the due `candidate` is polled now or skipped until its safety net.
    public func decide(_ candidate: Candidate, at now: Date) -> Decision {
        guard covers(candidate, at: now), let safetyNet = safetyNetAt(candidate) else { return .poll(.scheduled) }
        return safetyNet <= now ? .poll(.safetyNet) : .skip(until: safetyNet)
    }
}
