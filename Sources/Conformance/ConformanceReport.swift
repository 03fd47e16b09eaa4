import Foundation
import ReceiptCore

/// One scenario's counts.
public struct ConformanceTally: Sendable, Equatable {
    public var customers = 0
    public var answersChecked = 0
    public var wrong = 0
    public var late = 0
    public var eventsExpected = 0
    public var eventsMissing = 0
    public var eventsDuplicated = 0
    public var eventsOutOfOrder = 0
    public var eventsUnexpected = 0

    public init() {}

    mutating func add(_ other: ConformanceTally) {
        customers += other.customers
        answersChecked += other.answersChecked
        wrong += other.wrong
        late += other.late
        eventsExpected += other.eventsExpected
        eventsMissing += other.eventsMissing
        eventsDuplicated += other.eventsDuplicated
        eventsOutOfOrder += other.eventsOutOfOrder
        eventsUnexpected += other.eventsUnexpected
    }
}

/// One disagreement, printed with the customer's timeline.
public struct Disagreement: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case wrongAnswer(at: Date, expected: [HeldEntitlement], answered: [HeldEntitlement])
        case lateAnswer(at: Date, expected: [HeldEntitlement], answered: [HeldEntitlement])
        case events(user: Int, expected: [EventType], received: [EventType])
    }

    public var timeline: Timeline
    public var kind: Kind

    public var description: String {
        let what: String
        switch kind {
        case .wrongAnswer(let at, let expected, let answered), .lateAnswer(let at, let expected, let answered):
            let label = if case .wrongAnswer = kind { "wrong" } else { "late" }
            what = "\(label) answer at \(Lifecycle.format(at)): expected \(expected) answered \(answered)"
        case .events(let user, let expected, let received):
            what = "events of u\(user): expected \(expected.map(\.rawValue)) received \(received.map(\.rawValue))"
        }
        return what + "\n" + timeline.narrative
    }
}

/// Where a run's wall time went, by what the driver was doing: what bounds a run's length (it
/// waits on the system far more than it computes).
public struct ConformancePhases: Sendable, Equatable {
    /// Playing steps: devices' posts (each waits for its validation) and Apple's changes.
    public var steps: Duration = .zero
    /// Waiting after each window until every notification was delivered and every job done.
    public var settling: Duration = .zero
    /// Asking for customers' answers.
    public var checks: Duration = .zero
    /// The end: the last release, waiting for every webhook, the final checks.
    public var final: Duration = .zero

    public init() {}

    /// Adds the time since `lap` to `phase`, and starts the next lap now.
    mutating func lap(_ phase: WritableKeyPath<ConformancePhases, Duration>, _ lap: inout ContinuousClock.Instant) {
        let now = ContinuousClock.now
        self[keyPath: phase] += now - lap
        lap = now
    }

    /// "steps 12.3 s, settling 40.1 s, checks 8.0 s, final 2.2 s".
    public var description: String {
        func seconds(_ duration: Duration) -> String {
            String(format: "%.1f s", Double(duration.components.seconds) + Double(duration.components.attoseconds) * 1e-18)
        }
        return "steps \(seconds(steps)), settling \(seconds(settling)), checks \(seconds(checks)), final \(seconds(final))"
    }
}

/// A run's results: counts per scenario and every disagreement. Thread-safe through its owner
/// (the driver adds from one task).
public struct ConformanceReport: Sendable {
    public var tallies: [Scenario: ConformanceTally] = [:]
    public var disagreements: [Disagreement] = []
    /// Where the driver's wall time went.
    public var phases = ConformancePhases()
    /// Per fault kind, each of Apple's changes it made late: the simulated seconds from the change
    /// (Apple signing a notification, a device posting while Apple was down) until the deployment
    /// heard of it (the notification's post answered, the history sweep listing it, the device's
    /// post answered by Apple), nil if it never did.
    public var lateness: [Faults.Kind: [TimeInterval?]] = [:]
    /// Each kill of the worker process (``Faults/workerKilled``): the jobs it held when it died,
    /// which the janitor gave back (the run settled only once none was held).
    public var workerKills: [Int] = []
    /// Kills drawn but not done: the worker process held no job at any device post after it.
    public var workerKillsUndone = 0
    /// Kills that found the job they saw already settled (between the look at the worker's list
    /// and the signal): nothing to take back, so the kill was tried again at a later post.
    public var workerKillsEmpty = 0
    /// Webhook deliveries of an event the backend had already received, ignored by its id.
    public var repeatedDeliveries = 0
    /// The re-polls the deployment's scheduler queued, and those it skipped because Server
    /// Notifications covered the subscription (``RepollSafetyNet``).
    public var repollsMade = 0
    public var repollsSkipped = 0
    /// Without notifications: the differences of the webhook streams that are no entitlement
    /// change (``ConformanceCheck/entitlementChanges``), reported apart and not failed: a polled
    /// backend hears what each poll sees, the state, not every change between two polls (auto-renew
    /// turned off and on again in between is none; a pending downgrade is seen at the renewal).
    public var unseenByPolls = ConformanceCheck.EventComparison(missing: 0, duplicated: 0, outOfOrder: 0, unexpected: 0)
    /// The types of the expected events ``unseenByPolls`` counts missing, with their counts.
    public var unseenTypes: [EventType: Int] = [:]
    /// Without notifications: the app users whose stream differs and whose subscription had two
    /// of Apple's changes between two polls (all their differences are in ``unseenByPolls``).
    public var unseenBetweenPolls = 0
    /// With notifications: the app users whose stream ended with a lapse past the timelines'
    /// end, not judged (``events(_:user:received:polled:lapsedAfterEnd:)``).
    public var lapsedAfterEnd = 0

    /// How a polled app user's webhook stream is judged (an app without notifications).
    public struct Polled: Sendable, Equatable {
        /// The run's clock went on past the timelines' end until the last changes were heard, and
        /// a subscription the user held then lapsed meanwhile: one `subscription.expired` more.
        public var lapsedAfterEnd: Bool
        /// The customer's subscription had two changes between two polls: what the first did no
        /// poll saw, so none of the stream's differences is failed.
        public var betweenPolls: Bool

        public init(lapsedAfterEnd: Bool, betweenPolls: Bool) {
            self.lapsedAfterEnd = lapsedAfterEnd
            self.betweenPolls = betweenPolls
        }
    }

    public init() {}

    /// Counts a kill of the worker process that left `jobs` in its hands (none: an empty kill).
    public mutating func workerKilled(holding jobs: Int) {
        if jobs > 0 { workerKills.append(jobs) } else { workerKillsEmpty += 1 }
    }

    /// "worker process killed 6 times holding jobs: 9 jobs taken back by the janitor; 2 webhook
    /// deliveries repeated (the same event id, ignored)" (nil when the run killed none and no
    /// delivery was repeated).
    public var killsLine: String? {
        var parts: [String] = []
        if !workerKills.isEmpty {
            parts.append("worker process killed \(workerKills.count) times holding jobs: \(workerKills.reduce(0, +)) jobs taken back by the janitor")
        }
        if workerKillsEmpty > 0 { parts.append("\(workerKillsEmpty) kills found their job already settled (tried again)") }
        if workerKillsUndone > 0 { parts.append("\(workerKillsUndone) kills not done (no job in its hands at a later post)") }
        if repeatedDeliveries > 0 { parts.append("\(repeatedDeliveries) webhook deliveries repeated (the same event id, ignored)") }
        return parts.isEmpty ? nil : parts.joined(separator: "; ")
    }

    /// Counts a change `kind` made late, heard of `by` seconds after it was made (nil: never).
    public mutating func late(_ kind: Faults.Kind, by seconds: TimeInterval?) { lateness[kind, default: []].append(seconds) }

    /// How late one fault kind made the changes it touched.
    public struct Lateness: Sendable, Equatable {
        /// How many changes it made late.
        public var changes: Int
        /// Never heard of by the end of the run.
        public var neverHeard: Int
        /// Simulated seconds, of those heard of (0 when none was).
        public var p50: TimeInterval
        public var p99: TimeInterval
        public var max: TimeInterval

        public init(changes: Int, neverHeard: Int, p50: TimeInterval, p99: TimeInterval, max: TimeInterval) {
            self.changes = changes
            self.neverHeard = neverHeard
            self.p50 = p50
            self.p99 = p99
            self.max = max
        }
    }

    /// Each fault kind's lateness, nearest-rank percentiles.
    public var latenessByKind: [Faults.Kind: Lateness] {
        lateness.mapValues { all in
            let heard = all.compactMap { $0 }.sorted()
            func rank(_ p: Double) -> TimeInterval { heard.isEmpty ? 0 : heard[Swift.max(0, Int((p * Double(heard.count)).rounded(.up)) - 1)] }
            return Lateness(changes: all.count, neverHeard: all.count - heard.count, p50: rank(0.5), p99: rank(0.99), max: heard.last ?? 0)
        }
    }

    /// The lateness table the command prints under the scenarios' one: per fault kind, how many
    /// changes it made late, how many were never heard of, and p50/p99/max of the simulated
    /// time until the deployment heard of them. Empty when no fault made one late.
    public var latenessTable: String {
        let byKind = latenessByKind
        guard !byKind.isEmpty else { return "" }
        let rows =
            [["late by fault", "changes", "never heard", "p50", "p99", "max"]]
            + byKind.keys.sorted().map { kind in
                let l = byKind[kind]!
                return [kind.rawValue, String(l.changes), String(l.neverHeard)] + [l.p50, l.p99, l.max].map(Self.duration)
            }
        return Self.align(rows)
    }

    /// Simulated seconds as `1h 05m`, `12m 30s` or `45s`.
    static func duration(_ seconds: TimeInterval) -> String {
        let s = Int(seconds.rounded())
        if s >= 3_600 { return "\(s / 3_600)h \(String(format: "%02d", s % 3_600 / 60))m" }
        if s >= 60 { return "\(s / 60)m \(String(format: "%02d", s % 60))s" }
        return "\(s)s"
    }

    /// Rows as columns: the first left-aligned, the others right-aligned.
    static func align(_ rows: [[String]]) -> String {
        let widths = rows[0].indices.map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { cells in
            cells.enumerated().map { index, cell in
                index == 0
                    ? cell.padding(toLength: widths[0], withPad: " ", startingAt: 0)
                    : String(repeating: " ", count: widths[index] - cell.count) + cell
            }.joined(separator: "  ")
        }.joined(separator: "\n")
    }

    /// Counts one checked answer of `timeline`'s customer.
    public mutating func answer(_ timeline: Timeline, _ verdict: AnswerVerdict, at: Date, expected: [HeldEntitlement], answered: [HeldEntitlement]) {
        tallies[timeline.scenario, default: ConformanceTally()].answersChecked += 1
        switch verdict {
        case .right: return
        case .late:
            tallies[timeline.scenario, default: ConformanceTally()].late += 1
            disagreements.append(Disagreement(timeline: timeline, kind: .lateAnswer(at: at, expected: expected, answered: answered)))
        case .wrong:
            tallies[timeline.scenario, default: ConformanceTally()].wrong += 1
            disagreements.append(Disagreement(timeline: timeline, kind: .wrongAnswer(at: at, expected: expected, answered: answered)))
        }
    }

    /// Compares the events app user `user` of `timeline` received with the expected ones.
    /// - Parameters:
    ///   - polled: the app had no notifications (nil: it had): its entitlement changes are
    ///     compared as always (each missing one counted, unless ``Polled/betweenPolls``), every
    ///     duplicate too; the rest of the differences go to ``unseenByPolls``, apart.
    ///   - lapsedAfterEnd: with notifications, the clock ran on past the timelines' end (for the
    ///     history sweep to find lost notifications) and a subscription the user held lapsed
    ///     meanwhile: a re-poll then may have seen Apple's state past the model's last step
    ///     (expired, auto-renew off: nothing was planned), or not. Those last events, once each at
    ///     the stream's end, are counted in ``lapsedAfterEnd`` and not judged.
    public mutating func events(
        _ timeline: Timeline, user: Int, received: [EventType], polled: Polled? = nil, lapsedAfterEnd: Bool = false
    ) {
        var expected = timeline.expectedEvents(user: user)
        if let polled {
            if polled.lapsedAfterEnd { expected.append(.subscriptionExpired) }
            return polledEvents(timeline, user: user, expected: expected, received: received, betweenPolls: polled.betweenPolls)
        }
        var received = received
        if lapsedAfterEnd {
            let trimmed = Self.withoutLapse(received, expected: expected)
            if trimmed.count < received.count { self.lapsedAfterEnd += 1 }
            received = trimmed
        }
        let comparison = ConformanceCheck.compare(expected: expected, received: received)
        var tally = tallies[timeline.scenario, default: ConformanceTally()]
        tally.eventsExpected += expected.count
        tally.eventsMissing += comparison.missing
        tally.eventsDuplicated += comparison.duplicated
        tally.eventsOutOfOrder += comparison.outOfOrder
        tally.eventsUnexpected += comparison.unexpected
        tallies[timeline.scenario] = tally
        if !comparison.isClean {
            disagreements.append(Disagreement(timeline: timeline, kind: .events(user: user, expected: expected, received: received)))
        }
    }

    private mutating func polledEvents(
        _ timeline: Timeline, user: Int, expected: [EventType], received: [EventType], betweenPolls: Bool
    ) {
        let all = ConformanceCheck.compare(expected: expected, received: received)
        // Two changes between two polls: the stream follows what the polls saw, none of it failed.
        let changes = betweenPolls ? [] : ConformanceCheck.entitlementChanges
        let entitlement = ConformanceCheck.compare(
            expected: expected.filter(changes.contains), received: received.filter(changes.contains))
        var tally = tallies[timeline.scenario, default: ConformanceTally()]
        tally.eventsExpected += expected.count
        tally.eventsMissing += entitlement.missing
        tally.eventsDuplicated += all.duplicated
        tallies[timeline.scenario] = tally
        unseenByPolls.missing += all.missing - entitlement.missing
        unseenByPolls.outOfOrder += all.outOfOrder
        unseenByPolls.unexpected += all.unexpected
        if betweenPolls && !all.isClean { unseenBetweenPolls += 1 }
        var left = received.reduce(into: [EventType: Int]()) { $0[$1, default: 0] += 1 }
        for type in expected {
            if left[type, default: 0] > 0 { left[type, default: 0] -= 1 } else if !changes.contains(type) { unseenTypes[type, default: 0] += 1 }
        }
        if entitlement.missing > 0 || all.duplicated > 0 {
            disagreements.append(Disagreement(timeline: timeline, kind: .events(user: user, expected: expected, received: received)))
        }
    }

    /// `received` without the events of a lapse seen past the model's horizon: a trailing
    /// `subscription.expired`, and an `auto_renew_changed` just before it, each only when it is
    /// one more of its type than `expected` holds.
    static func withoutLapse(_ received: [EventType], expected: [EventType]) -> [EventType] {
        var kept = received
        func isExtra(_ type: EventType) -> Bool {
            kept.last == type && kept.count { $0 == type } > expected.count { $0 == type }
        }
        guard isExtra(.subscriptionExpired) else { return received }
        kept.removeLast()
        if isExtra(.subscriptionAutoRenewChanged) { kept.removeLast() }
        return kept
    }

    /// With notifications: the line that reports ``lapsedAfterEnd`` (nil when there is none).
    public var lapsedAfterEndLine: String? {
        guard lapsedAfterEnd > 0 else { return nil }
        return "\(lapsedAfterEnd) app users' subscriptions lapsed after the timelines' end, while the clock ran on for the "
            + "history sweep: the expiry a re-poll saw past the model's last step (and its auto-renew off) not judged"
    }

    /// Without notifications: the line that reports ``unseenByPolls`` (nil when there is none).
    public var unseenByPollsLine: String? {
        let u = unseenByPolls
        guard u.missing + u.outOfOrder + u.unexpected > 0 else { return nil }
        let types = unseenTypes.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue) ×\($0.value)" }.joined(separator: ", ")
        return "events a polled backend cannot hear as they happened (not failed; a poll sees the state, not each change "
            + "between two polls): \(u.missing) missing\(types.isEmpty ? "" : " (\(types))"), \(u.outOfOrder) out of order, "
            + "\(u.unexpected) unexpected"
            + (unseenBetweenPolls > 0 ? "; \(unseenBetweenPolls) app users had two changes between two polls, the first seen by none" : "")
    }

    /// "re-polls: 1,234 made, 56 skipped (covered by notifications)".
    public var repollsLine: String { "re-polls: \(repollsMade) made, \(repollsSkipped) skipped (covered by notifications)" }

    /// Counts a customer of `scenario`.
    public mutating func customer(_ scenario: Scenario) { tallies[scenario, default: ConformanceTally()].customers += 1 }

    /// Every scenario's counts added up.
    public var total: ConformanceTally {
        tallies.values.reduce(into: ConformanceTally()) { $0.add($1) }
    }

    /// The table `receiptq conformance` prints: one row per scenario, then the total.
    public var table: String {
        let header = ["scenario", "customers", "answers", "wrong", "late", "events", "missing", "duplicated", "out of order", "unexpected"]
        func row(_ name: String, _ t: ConformanceTally) -> [String] {
            [name]
                + [
                    t.customers, t.answersChecked, t.wrong, t.late, t.eventsExpected, t.eventsMissing, t.eventsDuplicated, t.eventsOutOfOrder,
                    t.eventsUnexpected,
                ].map(String.init)
        }
        return Self.align([header] + tallies.keys.sorted().map { row($0.rawValue, tallies[$0]!) } + [row("total", total)])
    }
}
