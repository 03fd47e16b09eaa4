import Foundation
import Hiredis
import ReceiptCore

/// The ``GuessingThrottle`` every API replica shares: one run of `RedisScripts.guessing` per
/// decision, on the API's connection pool, with the caller's clock.
///
/// ```swift
/// let throttle = RedisGuessingThrottle(pool: pool, keys: RedisKeys(), policy: GuessingPolicy())
/// if case .closed(let seconds) = try await throttle.verdict(for: attempt, now: Date()) { … 429 … }
/// ```
public struct RedisGuessingThrottle: GuessingThrottle {
    /// The lock-out rules (every replica should use the same).
    public let policy: GuessingPolicy
    private let pool: RedisConnectionPool
    private let keys: RedisKeys

    /// Creates the throttle on `pool`.
    public init(pool: RedisConnectionPool, keys: RedisKeys, policy: GuessingPolicy) {
        self.pool = pool
        self.keys = keys
        self.policy = policy
    }

    public func verdict(for attempt: AuthAttempt, now: Date) async throws -> ThrottleVerdict {
        try await run("verdict", attempt, now: now)
    }

    public func recordFailure(_ attempt: AuthAttempt, now: Date) async throws -> ThrottleVerdict {
        try await run("fail", attempt, now: now)
    }

    private func run(_ operation: String, _ attempt: AuthAttempt, now: Date) async throws -> ThrottleVerdict {
        let address = keys.guessingAddress(attempt.door.rawValue, attempt.address)
        let scriptKeys = attempt.account.map { [address, keys.guessingAccount(attempt.door.accounts, $0)] } ?? [address]
        let nowMs = Int64((now.timeIntervalSince1970 * 1000).rounded(.down))
        let arguments = [
            operation, String(nowMs), String(policy.freeFailuresPerAddress), String(policy.freeFailuresPerAccount),
            String(Self.milliseconds(policy.firstLockout)), String(Self.milliseconds(policy.longestLockout)),
            String(Self.milliseconds(policy.memory)),
        ].map { Array($0.utf8) }
        let reply = try await pool.withConnection { connection in
            try RedisScriptRunner.run(RedisScripts.guessing, keys: scriptKeys, arguments: arguments, on: connection)
        }
        guard let closedUntil = reply.int else { throw RedisQueueError.unexpectedReply("guessing") }
        guard Int64(closedUntil) > nowMs else { return .open }
        return .closed(retryAfter: GuessingPolicy.retryAfter(until: Date(timeIntervalSince1970: Double(closedUntil) / 1000), now: now))
    }

    private static func milliseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    }
}
