import Foundation

/// What one settled job adds to the per-minute activity the dashboard charts: its outcome and,
/// for a retry or a dead letter, the class of its failure. Both sets are closed, so a counter's
/// name (a Redis hash field, a metric label) never comes from Apple or from a client.
public enum ActivityOutcome: String, Sendable, CaseIterable {
    /// Stored with Apple's `valid` verdict.
    case validated
    /// Stored with Apple's `invalid` verdict (or as fraud).
    case invalid
    /// Back to the retry set with backoff.
    case retried
    /// To the dead letters.
    case dead
    /// Put back while the outage circuit is open, without using an attempt.
    case deferred
}

/// Counts of settled jobs by outcome and by failure class: what one batch adds to its minute, or
/// what one minute holds.
public struct ActivityTally: Sendable, Equatable {
    public var outcomes: [ActivityOutcome: Int]
    public var failures: [FailureClass: Int]

    /// An empty tally.
    public init(outcomes: [ActivityOutcome: Int] = [:], failures: [FailureClass: Int] = [:]) {
        self.outcomes = outcomes
        self.failures = failures
    }

    /// Counts one job; `failure` is its failure's code when it was retried or buried.
    public mutating func add(_ outcome: ActivityOutcome, failure: FailureCode? = nil) {
        outcomes[outcome, default: 0] += 1
        if outcome == .retried || outcome == .dead { failures[failure?.failureClass ?? .other, default: 0] += 1 }
    }

    /// Whether nothing was counted.
    public var isEmpty: Bool { outcomes.values.allSatisfy { $0 == 0 } && failures.values.allSatisfy { $0 == 0 } }

    /// Jobs Apple gave a verdict on (`validated` + `invalid`).
    public var verdicts: Int { outcomes[.validated, default: 0] + outcomes[.invalid, default: 0] }
}

/// One minute of activity, across every worker.
public struct ActivityMinute: Sendable, Equatable {
    /// The minute's start.
    public var minute: Date
    public var tally: ActivityTally

    /// Creates a minute.
    public init(minute: Date, tally: ActivityTally) {
        self.minute = minute
        self.tally = tally
    }
}

/// The outage circuit as the dashboard shows it.
public struct CircuitSnapshot: Sendable, Equatable {
    public var status: CircuitStatus
    /// Probes failed in a row since it opened (each doubles the open period).
    public var failedProbes: Int

    /// Creates a snapshot.
    public init(status: CircuitStatus, failedProbes: Int = 0) {
        self.status = status
        self.failedProbes = failedProbes
    }
}
