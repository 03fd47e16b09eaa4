import Foundation

/// When to ask Apple about a subscription again, as a pure function of its state and the time.
///
/// - **Active**: shortly before `expires_at` (the lead: a fraction of the period, capped), then just
///   after it, to see the renewal.
/// - **Grace / billing retry**: about daily (never less often than once a period), and just after
///   the grace period ends.
/// - **Expired / revoked / upgraded**: one final check a day (or a period, if shorter) after the
///   end, in case a late renewal or a resubscription shows up; after that, none.
///
/// Every delay scales with the subscription's period, because sandbox contracts time (a month
/// renews every five minutes there), and carries jitter, so that subscriptions renewing in the same
/// minute are not polled in the same second.
public struct RepollPolicy: Sendable, Equatable {
    /// The lead before expiry, as a fraction of the period (default 5 %).
    public var leadFraction: Double
    /// The largest lead (default 1 day: a yearly subscription is not polled weeks early).
    public var maxLead: Duration
    /// The smallest delay of any poll (default 5 s).
    public var minDelay: Duration
    /// The wait after expiry before the renewal is looked for, as a fraction of the period (default 0.5 %).
    public var afterFraction: Double
    /// The longest wait after expiry (default 30 min).
    public var maxAfter: Duration
    /// How often a subscription in grace or billing retry is polled, and how long after its end an
    /// expired one gets its final check (default 1 day; never longer than the period).
    public var troubleInterval: Duration
    /// The spread added to each poll, as a fraction of the delay it follows (default 0.25).
    public var jitter: Double

    /// Creates a policy; every value has a production default.
    public init(
        leadFraction: Double = 0.05, maxLead: Duration = .seconds(86_400), minDelay: Duration = .seconds(5),
        afterFraction: Double = 0.005, maxAfter: Duration = .seconds(1800), troubleInterval: Duration = .seconds(86_400),
        jitter: Double = 0.25
    ) {
        self.leadFraction = max(0, leadFraction)
        self.maxLead = maxLead
        self.minDelay = minDelay
        self.afterFraction = max(0, afterFraction)
        self.maxAfter = maxAfter
        self.troubleInterval = troubleInterval
        self.jitter = min(max(0, jitter), 1)
    }

    /// The period assumed when Apple's dates do not give one (a month).
    static let defaultPeriod: TimeInterval = 30 * 86_400

    /// The next poll of `state`, or nil when it needs none.
    /// - Parameters:
    ///   - state: the subscription as last observed.
    ///   - now: the injected clock's time.
    ///   - generator: randomness for the jitter.
    public func nextPoll(for state: SubscriptionState, at now: Date, using generator: inout some RandomNumberGenerator) -> Date? {
        let period = min(max(state.period ?? Self.defaultPeriod, 60), 400 * 86_400)
        let minimum = minDelay.seconds
        let trouble = max(min(troubleInterval.seconds, period), minimum)
        let after = min(max(period * afterFraction, minimum), max(maxAfter.seconds, minimum))
        func spread(_ delay: Double) -> Double { Double.random(in: 0...(delay * jitter), using: &generator) }
        func notBefore(_ date: Date) -> Date { max(date, now.addingTimeInterval(minimum)) }

        switch state.status {
        case .active:
            guard let expires = state.expiresAt else { return notBefore(now.addingTimeInterval(trouble + spread(trouble))) }
            let lead = min(max(period * leadFraction, minimum), max(maxLead.seconds, minimum))
            // Early rather than late: the jitter moves the poll further ahead of the expiry.
            let before = expires.addingTimeInterval(-lead - spread(lead))
            if before > now { return before }
            return notBefore(expires.addingTimeInterval(after + spread(after)))
        case .grace, .billingRetry:
            var next = now.addingTimeInterval(trouble + spread(trouble))
            if state.status == .grace, let graceEnd = state.gracePeriodExpiresAt, graceEnd > now {
                next = min(next, graceEnd.addingTimeInterval(after + spread(after)))
            }
            return notBefore(next)
        case .expired, .revoked, .upgraded:
            guard let end = state.revokedAt ?? state.expiresAt else { return nil }
            let finalCheck = end.addingTimeInterval(trouble)
            // The final check has happened once an answer arrives after it: stop.
            guard finalCheck > now else { return nil }
            return notBefore(finalCheck.addingTimeInterval(spread(after)))
        }
    }
}
