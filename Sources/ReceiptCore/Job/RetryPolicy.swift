import Foundation

/// Exponential backoff with full jitter, dense at first because a user is waiting.
///
/// Attempt `n` (1-based) waits a uniform random time in `[0, min(cap, base·2^(n-1))]` ("full
/// jitter": after an Apple outage, thousands of retries spread over the whole window instead of
/// arriving together), with a floor of a tenth of `base` so a retry never spins. Seconds at first,
/// minutes after a few failures, at most `cap`. A job whose first failure is older than `maxAge`
/// is given up (dead letters).
public struct RetryPolicy: Sendable, Equatable {
    public var base: Duration
    public var cap: Duration
    public var maxAge: Duration
    /// How many `21002` answers a receipt that decoded locally gets before it is stored `invalid`.
    /// 21002 means "malformed" as well as "temporary issue" (it spiked during Apple's outages), so a
    /// few retries are worth it; 72 hours of them are not.
    public var malformedAttempts: Int

    /// Creates a policy.
    /// - Parameters:
    ///   - base: the first delay's upper bound (default 2 s).
    ///   - cap: the largest delay (default 1 h).
    ///   - maxAge: how long after the first failure a job is still retried (default 72 h).
    ///   - malformedAttempts: `21002` answers before a locally decoded receipt is stored invalid (default 5).
    public init(
        base: Duration = .seconds(2), cap: Duration = .seconds(3600), maxAge: Duration = .seconds(72 * 3600), malformedAttempts: Int = 5
    ) {
        self.base = base
        self.cap = cap
        self.maxAge = maxAge
        self.malformedAttempts = max(1, malformedAttempts)
    }

    /// The upper bound of the delay before attempt `attempt` (1-based).
    public func ceiling(attempt: Int) -> Duration {
        let exponent = min(max(attempt - 1, 0), 40)
        let seconds = base.seconds * pow(2, Double(exponent))
        return .milliseconds(Int64(min(seconds, cap.seconds) * 1000))
    }

    /// When to run a job next, or nil to give up.
    /// - Parameters:
    ///   - attempt: the number of failed attempts so far (≥ 1).
    ///   - firstFailedAt: when the job first failed.
    ///   - now: the current time (from the injected clock).
    ///   - generator: randomness for the jitter.
    public func nextRun(
        attempt: Int, firstFailedAt: Date, now: Date, using generator: inout some RandomNumberGenerator
    ) -> Date? {
        let ceiling = self.ceiling(attempt: attempt).seconds
        let floor = min(base.seconds / 10, ceiling)
        let delay = Double.random(in: floor...ceiling, using: &generator)
        let runAt = now.addingTimeInterval(delay)
        guard runAt.timeIntervalSince(firstFailedAt) <= maxAge.seconds else { return nil }
        return runAt
    }
}

extension Duration {
    /// The duration in (fractional) seconds.
    public var seconds: Double {
        let (s, attoseconds) = components
        return Double(s) + Double(attoseconds) / 1e18
    }
}
