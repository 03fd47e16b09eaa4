import Dispatch
import Foundation
import ReceiptCore

/// Runs the shared ``ServerAPIRateLimiter`` (Redis, blocking) on its own serial queue, so the
/// HTTP engine's thread never waits for Redis.
///
/// When the limiter cannot be reached the call goes ahead: Apple's own `429` still protects the
/// limit, and a Redis hiccup must not stop validation.
public final class ServerAPIThrottle: @unchecked Sendable {
    // `@unchecked`: `limiter` is touched only on `queue`.
    private let queue = DispatchQueue(label: "receiptq.serverapi.throttle")
    private let makeLimiter: @Sendable () throws -> any ServerAPIRateLimiter
    private var limiter: (any ServerAPIRateLimiter)?

    /// Creates a throttle; `makeLimiter` is called again after a failure (a new connection).
    public init(makeLimiter: @escaping @Sendable () throws -> any ServerAPIRateLimiter) {
        self.makeLimiter = makeLimiter
    }

    /// Asks for one call (booking up to `bookingAhead` seconds ahead); `completion` gets the
    /// slot on the throttle's queue (`.now` when Redis cannot be asked).
    func reserve(
        app: String, endpoint: ServerAPIEndpoint, environment: AppStoreEnvironment, purpose: ApplePurpose, now: Date,
        bookingAhead: TimeInterval, completion: @escaping @Sendable (ServerAPISlot) -> Void
    ) {
        queue.async {
            completion(
                self.withLimiter {
                    try $0.reserve(
                        app: app, endpoint: endpoint, environment: environment, purpose: purpose, now: now, bookingAhead: bookingAhead)
                } ?? .now)
        }
    }

    /// The same, awaited.
    func reserve(
        app: String, endpoint: ServerAPIEndpoint, environment: AppStoreEnvironment, purpose: ApplePurpose, now: Date,
        bookingAhead: TimeInterval
    ) async -> ServerAPISlot {
        await withCheckedContinuation { continuation in
            reserve(app: app, endpoint: endpoint, environment: environment, purpose: purpose, now: now, bookingAhead: bookingAhead) {
                continuation.resume(returning: $0)
            }
        }
    }

    /// Pauses every call of `app` until `until` (after Apple's `429`).
    func pause(app: String, environment: AppStoreEnvironment, until: Date, now: Date) {
        queue.async { _ = self.withLimiter { try $0.pause(app: app, environment: environment, until: until, now: now) } }
    }

    private func withLimiter<T>(_ body: (any ServerAPIRateLimiter) throws -> T) -> T? {
        do {
            if limiter == nil { limiter = try makeLimiter() }
            guard let limiter else { return nil }
            return try body(limiter)
        } catch {
            limiter = nil
            return nil
        }
    }
}
