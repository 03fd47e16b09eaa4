import Foundation

/// Whether a credential may be checked now.
public enum ThrottleVerdict: Sendable, Equatable {
    case open
    /// Too many failures; back in this many seconds (at least 1).
    case closed(retryAfter: Int)
}

/// Failed authentications, counted per door and client address and per account, shared by every
/// API replica (Redis), with the lock-out of ``GuessingPolicy``.
///
/// An address is closed at a door after its own failures there (a backend with a revoked token
/// does not lock its operators out of the dashboard). An account is closed after failures from any
/// address, but only to addresses that have failed themselves: a right password from an address
/// that never failed is never refused because another address failed (a botnet gets one guess per
/// address on a closed account).
public protocol GuessingThrottle: Sendable {
    /// Whether `attempt` may be checked now. Throws when the shared state cannot be read.
    func verdict(for attempt: AuthAttempt, now: Date) async throws -> ThrottleVerdict
    /// Counts a failed `attempt` against its address and account; the verdict for the next one.
    func recordFailure(_ attempt: AuthAttempt, now: Date) async throws -> ThrottleVerdict
}
