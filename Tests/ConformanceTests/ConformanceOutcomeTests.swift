import Conformance
import Foundation
import ReceiptCore
import Testing

@Suite("What `receiptq conformance` prints and exits with")
struct ConformanceOutcomeTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)
    static let run = ConformanceRun(customers: 2, days: 30, faults: Faults(.default), seed: 45)

    /// A two-customer report, every answer right and every event received, with `change` applied.
    static func outcome(_ change: (inout ConformanceReport, Timeline) -> Void = { _, _ in }) -> ConformanceRun.Outcome {
        let timelines = LifecycleGenerator(catalogue: ConformanceCatalogue(bundleID: "com.example.c"), start: start, days: 30, seed: 45)
            .timelines(customers: 2)
        var report = ConformanceReport()
        for timeline in timelines {
            report.customer(timeline.scenario)
            report.answer(timeline, .right, at: start, expected: [], answered: [])
            for user in timeline.users.indices { report.events(timeline, user: user, received: timeline.expectedEvents(user: user)) }
        }
        change(&report, timelines[0])
        return ConformanceRun.Outcome(run: run, report: report, start: start, wall: .seconds(4), database: "receiptq_conformance_0")
    }

    @Test("a clean run is conformant: exit 0; the summary names the seed, the span, the preset and the wall time")
    func clean() {
        let outcome = Self.outcome()
        #expect(outcome.conformant)
        let summary = outcome.summary(verbose: false)
        #expect(summary.hasPrefix(outcome.report.table))
        #expect(summary.contains("seed 45, 2 customers, 30 simulated days (2027-01-15T08:00:00 → 2027-02-14T08:00:00), faults default"))
        #expect(summary.contains("wall time 4.0 s (0.50 customers/s)"))
        #expect(summary.hasSuffix("conformant: no wrong answer after convergence, no event missing or duplicated"))
        #expect(outcome.json["customers_per_wall_s"] == .number(0.5))
        #expect(outcome.json["total"]?["answers_checked"] == .number(2))
        #expect(outcome.json["faults"] == .string("default"))
    }

    @Test("a late answer or an event out of order is counted, not failed; a wrong answer or a missing or duplicated event fails the run")
    func verdicts() {
        let late = Self.outcome { report, timeline in report.answer(timeline, .late, at: Self.start, expected: [], answered: []) }
        #expect(late.conformant)
        let wrong = Self.outcome { report, timeline in
            report.answer(timeline, .wrong, at: Self.start, expected: [HeldEntitlement(id: "pro", until: nil)], answered: [])
        }
        #expect(!wrong.conformant)
        #expect(wrong.summary(verbose: false).contains("wrong answer at"), "the disagreement, with the customer's timeline")
        #expect(wrong.summary(verbose: false).hasSuffix("NOT conformant: 1 wrong answers after convergence, 0 events missing, 0 duplicated"))
        let duplicated = Self.outcome { report, timeline in
            report.events(timeline, user: 0, received: timeline.expectedEvents(user: 0) + timeline.expectedEvents(user: 0).prefix(1))
        }
        #expect(!duplicated.conformant)
        let missing = Self.outcome { report, timeline in report.events(timeline, user: 0, received: []) }
        #expect(!missing.conformant)
        #expect(
            ConformanceRun.Outcome(
                run: ConformanceRun(customers: 1, days: 1, faults: Faults(duplicates: true), seed: 1), report: .init(),
                start: Self.start, wall: .seconds(1), database: "d"
            ).faults == "custom")
    }

    @Test("kills of the worker process, the jobs taken back and the webhook repeats are printed under the table and in the JSON")
    func kills() {
        #expect(Self.outcome().report.killsLine == nil, "a run without kills or repeats says nothing of them")
        #expect(!Self.outcome().summary(verbose: false).contains("worker process"))
        let killed = Self.outcome { report, _ in
            report.workerKilled(holding: 2)
            report.workerKilled(holding: 1)
            report.workerKilled(holding: 0)
            report.workerKillsUndone = 1
            report.repeatedDeliveries = 2
        }
        #expect(killed.conformant, "a repeated delivery of one event is no duplicated event")
        let line =
            "worker process killed 2 times holding jobs: 3 jobs taken back by the janitor; 1 kills found their job already settled "
            + "(tried again); 1 kills not done (no job in its hands at a later post); 2 webhook deliveries repeated (the same event "
            + "id, ignored)"
        #expect(killed.report.killsLine == line)
        #expect(killed.summary(verbose: false).contains("\n" + line + "\n"))
        #expect(killed.json["worker_kills"] == .number(2))
        #expect(killed.json["jobs_taken_back"] == .number(3))
        #expect(killed.json["worker_kills_empty"] == .number(1))
        #expect(killed.json["deliveries_repeated"] == .number(2))
    }

    @Test("`killed` is a worker killed alone; `all` has it, `default` does not")
    func killedPreset() {
        #expect(Faults(.killed) == Faults(workerKilled: true))
        #expect(Faults(.all).workerKilled)
        #expect(!Faults(.default).workerKilled)
    }

    @Test("a run of no customer or no day is refused")
    func validation() {
        #expect(throws: ConformanceRun.InvalidArgument.self) { try ConformanceRun(customers: 0, days: 30, faults: Faults(), seed: 1).validate() }
        #expect(throws: ConformanceRun.InvalidArgument.self) { try ConformanceRun(customers: 3, days: 0, faults: Faults(), seed: 1).validate() }
        #expect(throws: Never.self) { try ConformanceRun(customers: 1, days: 1, faults: Faults(), seed: 1).validate() }
    }

    @Test("--no-notifications plays no notification fault and no outage: refused with a reason; none and killed are played")
    func noNotificationFaults() {
        for preset in [Faults.Preset.default, .all, .lost, .outage] {
            let error = #expect(throws: ConformanceRun.InvalidArgument.self) {
                try ConformanceRun(customers: 4, days: 30, faults: Faults(preset), seed: 1, notifications: false).validate()
            }
            #expect(error?.description.contains("--no-notifications") == true)
        }
        for preset in [Faults.Preset.none, .killed] {
            #expect(throws: Never.self) {
                try ConformanceRun(customers: 4, days: 30, faults: Faults(preset), seed: 1, notifications: false).validate()
            }
        }
    }

    @Test("Without notifications the summary says so and counts the re-polls; the JSON too")
    func noNotificationSummary() {
        var outcome = Self.outcome { report, _ in
            report.repollsMade = 12
            report.repollsSkipped = 0
        }
        outcome.run.notifications = false
        #expect(
            outcome.summary(verbose: false).contains(
                "\nno notifications (the app has no URL); re-polls: 12 made, 0 skipped (covered by notifications)\n"))
        #expect(outcome.json["notifications"] == .bool(false))
        #expect(outcome.json["repolls_made"] == .number(12))
    }

    @Test("A lapse a re-poll saw past the model's horizon ends a stream uncounted (once, at its end); anything else extra is unexpected")
    func lapseAfterEnd() throws {
        let lapse: [EventType] = [.subscriptionAutoRenewChanged, .subscriptionExpired]
        /// Whether the stream's differences were judged (which column depends on the timeline's own events).
        func judged(_ outcome: ConformanceRun.Outcome) -> Bool {
            let total = outcome.report.total
            return total.eventsUnexpected + total.eventsDuplicated + total.eventsOutOfOrder > 0
        }
        let excused = Self.outcome { report, timeline in
            report.events(timeline, user: 0, received: timeline.expectedEvents(user: 0) + lapse, lapsedAfterEnd: true)
        }
        #expect(!judged(excused))
        #expect(excused.report.lapsedAfterEnd == 1)
        #expect(excused.json["lapsed_after_end"] == .number(1))
        let line = try #require(excused.report.lapsedAfterEndLine)
        #expect(excused.summary(verbose: false).contains("\n" + line + "\n"))
        #expect(Self.outcome().report.lapsedAfterEndLine == nil, "nothing said when nothing lapsed")
        // Not past the horizon, or not at the stream's end, or twice: judged as always.
        let notLapsed = Self.outcome { report, timeline in
            report.events(timeline, user: 0, received: timeline.expectedEvents(user: 0) + lapse)
        }
        #expect(judged(notLapsed) && notLapsed.report.lapsedAfterEnd == 0)
        let twice = Self.outcome { report, timeline in
            report.events(timeline, user: 0, received: timeline.expectedEvents(user: 0) + lapse + lapse, lapsedAfterEnd: true)
        }
        #expect(judged(twice))
        let inside = Self.outcome { report, timeline in
            report.events(timeline, user: 0, received: lapse + timeline.expectedEvents(user: 0), lapsedAfterEnd: true)
        }
        #expect(judged(inside) && inside.report.lapsedAfterEnd == 0)
    }
}
