import Foundation
import Logging
import Metrics
import ReceiptCore
import Synchronization

/// The ``AuthenticationLog`` of the API: every refused authentication and every throttled attempt
/// logged at `notice` (door, client address, account, reason; never a secret), granted ones only
/// counted, each in `receiptq_auth_attempts_total{door, outcome}`.
///
/// A flood is logged line by line: the lines are what an operator greps for the address to block,
/// and the counter is what the `ReceiptqAuthenticationFailures` alert watches.
public final class SecurityLog: AuthenticationLog {
    private let logger: Logger
    private let counters: [String: Counter]
    /// When the throttle's unavailability was last logged (once a minute at most).
    private let unavailableLogged = Mutex<Date>(.distantPast)

    /// The `outcome` label's values.
    public static let outcomes = ["granted", "refused", "forbidden", "throttled"]

    /// Creates the log; every door's and outcome's counter exists from the start (a scrape shows
    /// zeros, not nothing).
    public init(logger: Logger, metrics: any MetricsFactory) {
        self.logger = logger
        var counters: [String: Counter] = [:]
        for door in AuthDoor.allCases {
            for outcome in Self.outcomes {
                counters["\(door.rawValue) \(outcome)"] = Counter(
                    label: MetricCatalog.authAttempts, dimensions: [("door", door.rawValue), ("outcome", outcome)], factory: metrics)
            }
        }
        self.counters = counters
    }

    public func record(_ attempt: AuthAttempt, outcome: AuthOutcome) {
        counters["\(attempt.door.rawValue) \(outcome.label)"]?.increment()
        var metadata: Logger.Metadata = [
            "auth.door": "\(attempt.door.rawValue)", "auth.outcome": "\(outcome.label)", "client.address": "\(attempt.address)",
        ]
        if let account = attempt.account { metadata["auth.account"] = "\(account)" }
        switch outcome {
        case .granted:
            return
        case .refused(let reason):
            metadata["auth.reason"] = "\(reason.rawValue)"
            logger.notice(reason == .forbidden ? "Privileged request refused" : "Authentication refused", metadata: metadata)
        case .throttled(let seconds):
            metadata["http.retry_after"] = "\(seconds)"
            logger.notice("Authentication throttled", metadata: metadata)
        }
    }

    public func throttleUnavailable(_ error: any Error) {
        let now = Date()
        let due = unavailableLogged.withLock { last in
            guard now.timeIntervalSince(last) >= 60 else { return false }
            last = now
            return true
        }
        if due { logger.warning("Login throttle: Redis unreachable, this process counts failures alone", error: error) }
    }
}
