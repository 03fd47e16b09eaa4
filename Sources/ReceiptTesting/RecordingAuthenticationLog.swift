import Foundation
import ReceiptCore
import Synchronization

/// An ``AuthenticationLog`` that keeps what it was told, for tests that check what a door reported.
public final class RecordingAuthenticationLog: AuthenticationLog {
    private let entries = Mutex<[(AuthAttempt, AuthOutcome)]>([])
    private let outages = Mutex(0)

    /// Creates an empty log.
    public init() {}

    public func record(_ attempt: AuthAttempt, outcome: AuthOutcome) { entries.withLock { $0.append((attempt, outcome)) } }
    public func throttleUnavailable(_ error: any Error) { outages.withLock { $0 += 1 } }

    /// Everything recorded, in order.
    public var recorded: [(attempt: AuthAttempt, outcome: AuthOutcome)] { entries.withLock { $0.map { ($0.0, $0.1) } } }
    /// How many times the shared throttle was reported unreachable.
    public var unavailableCount: Int { outages.withLock { $0 } }
}

extension AuthGate {
    /// A gate on a process-local throttle with `policy`, reporting to `log`: for tests without Redis.
    public static func local(policy: GuessingPolicy = GuessingPolicy(), log: any AuthenticationLog = RecordingAuthenticationLog()) -> AuthGate {
        AuthGate(throttle: LocalGuessingThrottle(policy: policy), policy: policy, log: log)
    }
}
