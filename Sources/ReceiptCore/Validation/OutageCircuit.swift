import Foundation

/// When the shared outage circuit opens, how long it stays open, and how its probes back off: the
/// numbers of the circuit's rules, which every implementation receives.
///
/// The circuit counts verifications over a sliding `window` (in buckets of `bucketWidth`, so that
/// the Redis implementation can keep one small counter per bucket). It opens when at least
/// `minimumFailures` of them were outages *and* they were at least `failureRatio` of all the calls:
/// the count stops a quiet night's three failures from opening it, the ratio stops a busy hour's
/// sporadic failures from doing so. Open, it denies every call for `openDuration`; then one lane
/// probes, holding a lease of `probeLease`, and its verdict closes the circuit or opens it again
/// for twice the last period, at most `maximumOpenDuration`.
///
/// The rules themselves run in one place in production, the Redis adapter's circuit script, which
/// receives these numbers as arguments. `ReceiptTesting`'s `MemoryOutageCircuit` follows the same
/// rules for the worker's tests, and one contract suite holds both implementations to them.
///
/// ```swift
/// let policy = CircuitPolicy(minimumFailures: 50, openDuration: .seconds(5))
/// let circuit = RedisOutageCircuit(connection: redis, keys: RedisKeys(), policy: policy)
/// ```
public struct CircuitPolicy: Sendable, Equatable {
    /// How far back outages count.
    public var window: Duration
    /// The granularity of the window: calls are counted per bucket of this width.
    public var bucketWidth: Duration
    /// The fewest outages in the window that can open the circuit.
    public var minimumFailures: Int
    /// The share of the window's calls that must be outages to open the circuit (0…1).
    public var failureRatio: Double
    /// How long the circuit stays open before the first probe.
    public var openDuration: Duration
    /// The longest open period: each failed probe doubles the period up to this.
    public var maximumOpenDuration: Duration
    /// How long the prober holds its lease: another lane may probe once it lapses, so a prober
    /// that died does not keep the circuit open forever. Must exceed one whole verification.
    public var probeLease: Duration

    /// Creates a policy. Out-of-range values are clamped so that a misconfiguration cannot make the
    /// circuit open on the first failure or never close.
    /// - Parameters:
    ///   - window: how far back outages count (default 30 s).
    ///   - bucketWidth: counting granularity (default 1 s); the window holds at most 300 buckets.
    ///   - minimumFailures: the fewest outages that open the circuit (default 20, at least 1).
    ///   - failureRatio: the share of calls that must be outages (default 0.8, within 0…1).
    ///   - openDuration: the first open period (default 10 s).
    ///   - maximumOpenDuration: the longest open period (default 5 min).
    ///   - probeLease: how long a probe may take before another lane probes (default 30 s).
    public init(
        window: Duration = .seconds(30), bucketWidth: Duration = .seconds(1), minimumFailures: Int = 20, failureRatio: Double = 0.8,
        openDuration: Duration = .seconds(10), maximumOpenDuration: Duration = .seconds(300), probeLease: Duration = .seconds(30)
    ) {
        let minimumStep = Duration.milliseconds(1)
        self.bucketWidth = max(bucketWidth, minimumStep)
        // A window of more than 300 buckets would make every recorded outage read 300+ keys.
        self.window = min(max(window, self.bucketWidth), self.bucketWidth * 300)
        self.minimumFailures = max(minimumFailures, 1)
        self.failureRatio = failureRatio.isNaN ? 1 : min(max(failureRatio, 0), 1)
        self.openDuration = max(openDuration, minimumStep)
        self.maximumOpenDuration = max(maximumOpenDuration, self.openDuration)
        self.probeLease = max(probeLease, minimumStep)
    }

    /// How many buckets the window spans (the current one included).
    public var bucketCount: Int {
        let width = CircuitTime.milliseconds(bucketWidth)
        return Int((CircuitTime.milliseconds(window) + width - 1) / width)
    }

    /// The bucket `date` falls in; buckets are numbered from 1970, so every process agrees.
    /// - Parameter date: a time from the caller's clock.
    /// - Returns: the bucket's number (the Unix second, with the default width).
    public func bucketIndex(at date: Date) -> Int64 {
        let width = CircuitTime.milliseconds(bucketWidth)
        let ms = CircuitTime.milliseconds(date)
        // Floor division, so times before 1970 (only in odd tests) still fall in one bucket each.
        return ms >= 0 ? ms / width : -((-ms + width - 1) / width)
    }

}

/// What a lane may do before calling Apple.
public enum CircuitPermission: Sendable, Equatable {
    /// The circuit is closed: call Apple.
    case allow
    /// The open period is over and this lane is the single prober: call Apple and report the
    /// outcome with ``OutageCircuit/record(outage:now:)``; the verdict closes or re-opens the circuit.
    case probe
    /// Apple is down for everyone: do not call it; try again at `until` (or later).
    case deny(until: Date)
}

/// The circuit's state, for dashboards and metrics.
public enum CircuitStatus: Sendable, Equatable {
    /// Calls go through.
    case closed
    /// Calls are denied until `until`.
    case open(until: Date)
    /// The open period is over: one probe is allowed (or in flight); the others are still denied.
    case halfOpen

    /// A bounded name for metric labels and logs: `closed`, `open` or `half_open`.
    public var name: String {
        switch self {
        case .closed: "closed"
        case .open: "open"
        case .halfOpen: "half_open"
        }
    }
}

/// A change of the circuit caused by a recorded outcome; returned so that exactly one lane (the
/// one whose record caused it) logs it or counts it in a metric.
public enum CircuitTransition: Sendable, Equatable {
    /// A run of outages opened the closed circuit until `until`.
    case opened(until: Date)
    /// The probe met an outage: open again until `until`, after `failedProbes` failed probes in a row.
    case reopened(until: Date, failedProbes: Int)
    /// The probe got an answer from Apple: calls go through again.
    case closed
}

/// The shared circuit as one worker lane sees it: asked before every verification, told after it.
///
/// Blocking, like ``JobQueue``: each lane owns one and calls it from its own Dispatch thread; all
/// lanes of all processes share the same state (Redis in production, `ReceiptTesting`'s
/// `MemoryOutageCircuit` in tests). Time always comes from the caller, so tests drive it.
public protocol OutageCircuit: AnyObject {
    /// Before calling Apple: may this lane call now?
    /// - Parameter now: the current time from the lane's injected clock.
    /// - Returns: `.allow`, `.probe` (this lane is the single prober; report its outcome), or
    ///   `.deny(until:)`.
    /// - Throws: when the shared state is unreachable.
    func permission(now: Date) throws -> CircuitPermission

    /// After a call (or a whole verification): what Apple did. Outages count against the circuit;
    /// any answer from Apple (valid/invalid/transient status) counts as success.
    /// - Parameters:
    ///   - outage: whether the verdict was ``AppleVerdict/outage``.
    ///   - now: the current time from the lane's injected clock.
    /// - Returns: the transition this record caused, if any.
    /// - Throws: when the shared state is unreachable.
    @discardableResult
    func record(outage: Bool, now: Date) throws -> CircuitTransition?

    /// After a batch of calls that were not probes: their outcomes in one step, so that a lane
    /// verifying thousands of receipts a second does not pay one round trip per receipt.
    ///
    /// The same as calling ``record(outage:now:)`` `successes` times and then `outages` times at
    /// `now`, except that only one transition can result: the batch can open the closed circuit,
    /// nothing else. While the circuit is open (or half-open) a batch is ignored, because only the
    /// prober's verdict counts there, and the prober always reports with ``record(outage:now:)``.
    /// Zero successes and zero outages change nothing; negative counts are taken as zero.
    /// - Parameters:
    ///   - successes: calls that got an answer from Apple (valid/invalid/transient status).
    ///   - outages: calls whose verdict was ``AppleVerdict/outage``.
    ///   - now: the current time from the lane's injected clock; the whole batch counts at it.
    /// - Returns: `.opened(until:)` when the batch opened the circuit, otherwise nil.
    /// - Throws: when the shared state is unreachable.
    @discardableResult
    func record(successes: Int, outages: Int, now: Date) throws -> CircuitTransition?

    /// The current state, for dashboards and metrics.
    /// - Parameter now: the current time from the caller's injected clock.
    /// - Throws: when the shared state is unreachable.
    func state(now: Date) throws -> CircuitStatus
}

/// Millisecond conversions, in one place: the Redis script works in integer milliseconds, so every
/// implementation of the circuit does too, and all round alike.
public enum CircuitTime {
    /// Rounded to the nearest millisecond, so that a `Date` made from milliseconds converts back exactly.
    public static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    /// Whole milliseconds, the rest cut off.
    public static func milliseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    /// The time `milliseconds` after 1970.
    public static func date(_ milliseconds: Int64) -> Date { Date(timeIntervalSince1970: Double(milliseconds) / 1000) }
}
