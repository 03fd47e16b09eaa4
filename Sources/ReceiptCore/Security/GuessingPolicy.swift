import Foundation

/// How failed authentications lock out: a few failures are free, then each failure closes the
/// address (or account) for twice as long as the one before, up to a cap; failures are forgotten
/// some time after the last one.
///
/// With the defaults an address gets 5 free guesses, then waits 1 s, 2 s, 4 s … 15 min between
/// guesses: about 100 guesses a day. Every process sharing the throttle should use the same.
public struct GuessingPolicy: Sendable, Equatable {
    /// Failures from one address before it is closed.
    public var freeFailuresPerAddress: Int
    /// Failures against one account, from any address, before it is closed to failing addresses.
    public var freeFailuresPerAccount: Int
    /// The first lock-out.
    public var firstLockout: Duration
    /// The longest lock-out.
    public var longestLockout: Duration
    /// How long after its last failure an address or account is forgotten.
    public var memory: Duration

    /// Creates a policy (the defaults are the documented `AUTH_THROTTLE_*` defaults).
    public init(
        freeFailuresPerAddress: Int = 5, freeFailuresPerAccount: Int = 20, firstLockout: Duration = .seconds(1),
        longestLockout: Duration = .seconds(900), memory: Duration = .seconds(3600)
    ) {
        self.freeFailuresPerAddress = freeFailuresPerAddress
        self.freeFailuresPerAccount = freeFailuresPerAccount
        self.firstLockout = firstLockout
        self.longestLockout = longestLockout
        self.memory = memory
    }

    /// How long a key with `failures` failures is closed after the last of them (zero: open).
    public func lockout(afterFailures failures: Int, free: Int) -> Duration {
        guard failures > free else { return .zero }
        let doublings = min(failures - free - 1, 40)
        let seconds = min(firstLockout.seconds * pow(2, Double(doublings)), longestLockout.seconds)
        return .milliseconds(Int64((seconds * 1000).rounded(.up)))
    }

    /// Seconds for a `Retry-After` header until `until` (at least 1).
    public static func retryAfter(until: Date, now: Date) -> Int { max(1, Int(until.timeIntervalSince(now).rounded(.up))) }
}
