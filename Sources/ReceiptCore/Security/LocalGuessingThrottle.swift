import Foundation
import Synchronization

/// The ``GuessingThrottle`` of one process, in memory: what the doors fall back on while the
/// shared one (Redis) cannot be reached, so an outage never opens unlimited guessing; and the
/// throttle of tests that need none shared. The same rules as the shared one.
public final class LocalGuessingThrottle: GuessingThrottle {
    public let policy: GuessingPolicy
    private struct Entry {
        var failures: Int
        var closedUntil: Date
        var lastFailure: Date
    }
    private let state = Mutex<(addresses: [String: Entry], accounts: [String: Entry])>(([:], [:]))
    /// The most keys remembered per kind: past it the forgotten ones are dropped, then the rest.
    static let capacity = 10_000

    /// Creates a throttle with `policy`.
    public init(policy: GuessingPolicy = GuessingPolicy()) { self.policy = policy }

    public func verdict(for attempt: AuthAttempt, now: Date) -> ThrottleVerdict {
        state.withLock { state in
            let address = live(state.addresses[addressKey(attempt)], now: now)
            var until = address?.closedUntil ?? .distantPast
            if address != nil, let name = accountKey(attempt), let account = live(state.accounts[name], now: now) {
                until = max(until, account.closedUntil)
            }
            return until > now ? .closed(retryAfter: GuessingPolicy.retryAfter(until: until, now: now)) : .open
        }
    }

    public func recordFailure(_ attempt: AuthAttempt, now: Date) -> ThrottleVerdict {
        state.withLock { state in
            let address = failed(&state.addresses, key: addressKey(attempt), free: policy.freeFailuresPerAddress, now: now)
            var until = address.closedUntil
            if let name = accountKey(attempt) {
                until = max(until, failed(&state.accounts, key: name, free: policy.freeFailuresPerAccount, now: now).closedUntil)
            }
            return until > now ? .closed(retryAfter: GuessingPolicy.retryAfter(until: until, now: now)) : .open
        }
    }

    private func addressKey(_ attempt: AuthAttempt) -> String { "\(attempt.door.rawValue) \(attempt.address)" }

    private func accountKey(_ attempt: AuthAttempt) -> String? { attempt.account.map { "\(attempt.door.accounts):\($0)" } }

    private func live(_ entry: Entry?, now: Date) -> Entry? {
        guard let entry, now.timeIntervalSince(entry.lastFailure) < policy.memory.seconds else { return nil }
        return entry
    }

    private func failed(_ entries: inout [String: Entry], key: String, free: Int, now: Date) -> Entry {
        if entries.count >= Self.capacity {
            entries = entries.filter { live($0.value, now: now) != nil }
            if entries.count >= Self.capacity { entries.removeAll() }
        }
        var entry = live(entries[key], now: now) ?? Entry(failures: 0, closedUntil: .distantPast, lastFailure: now)
        entry.failures += 1
        entry.lastFailure = now
        let lockout = policy.lockout(afterFailures: entry.failures, free: free)
        if lockout > .zero { entry.closedUntil = now.addingTimeInterval(lockout.seconds) }
        entries[key] = entry
        return entry
    }
}
