import Foundation
import Logging
import ReceiptCore

/// One conformance run, as `receiptq conformance` and the bench row play it: `customers`
/// customers' timelines over `days` simulated days under a fault preset, through a
/// ``ConformanceDeployment`` (the whole system in process, on a simulated clock), and the report.
///
/// The seed decides every timeline (scenario, moments, renewals, trouble) and every fault drawn:
/// the same seed, customers and days play the same run again, shifted to the new start.
public struct ConformanceRun: Sendable, Equatable {
    public var customers: Int
    public var days: Int
    public var faults: Faults
    public var seed: UInt64
    /// Whether the app receives Server Notifications V2 (`--no-notifications`: false, Apple's
    /// changes reach the deployment only by its re-polls and devices' posts; see
    /// ``ConformanceDriver/notifications``).
    public var notifications: Bool

    public init(customers: Int, days: Int, faults: Faults, seed: UInt64, notifications: Bool = true) {
        self.customers = customers
        self.days = days
        self.faults = faults
        self.seed = seed
        self.notifications = notifications
    }

    /// What was wrong with the arguments.
    public struct InvalidArgument: Error, CustomStringConvertible {
        public var description: String
    }

    /// Refuses a run that could not mean anything: no customer, no day.
    public func validate() throws {
        guard customers >= 1 else { throw InvalidArgument(description: "--customers must be at least 1, not \(customers)") }
        guard days >= 1 else { throw InvalidArgument(description: "--days must be at least 1, not \(days)") }
        // Nothing is posted, so there is no notification to fault; Apple's outage is played
        // around the notification mode's windows.
        if !notifications, faults.duplicates || faults.delayedAndReordered || faults.lostNotifications || faults.outage {
            throw InvalidArgument(
                description: "--no-notifications plays no notification fault and no outage: use --faults none or killed")
        }
    }

    /// The running executable (Linux's `/proc/self/exe`, resolved): `receiptq` when the command runs.
    public static var ownExecutable: URL {
        URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? "/proc/self/exe")
    }

    /// `base` for the deployment's roles: their routine lines would bury the table, so they say
    /// only errors (warnings too when `verbose`); `LOG_LEVEL` can only make them quieter.
    public static func rolesLogger(_ base: Logger, verbose: Bool) -> Logger {
        var logger = base
        logger.logLevel = max(base.logLevel, verbose ? .warning : .error)
        return logger
    }

    /// Plays the run against a deployment started from `environment` (where Redis and Postgres
    /// are), and stops it (removing its database and keys) whatever happens.
    /// - Parameters:
    ///   - logger: the deployment's roles' logger.
    ///   - executable: `receiptq`, which the deployment starts as its worker process under
    ///     ``Faults/workerKilled`` (the command's own executable by default; tests give their build's).
    ///   - log: told of each disagreement as the driver finds it (`--verbose`).
    public func play(
        environment: [String: String], logger: Logger, executable: URL = ConformanceRun.ownExecutable,
        log: @escaping @Sendable (String) -> Void = { _ in }
    ) async throws -> Outcome {
        try validate()
        let began = ContinuousClock.now
        // A minute ahead: the first purchases are dated after the deployment's start.
        let start = Date().addingTimeInterval(60)
        let clock = SimulatedClock(start: start)
        let deployment = try await ConformanceDeployment.start(
            environment: environment, clock: clock, workerExecutable: faults.workerKilled ? executable : nil, notifications: notifications,
            logger: logger)
        var report: ConformanceReport
        do {
            let timelines = LifecycleGenerator(catalogue: ConformanceCatalogue(bundleID: deployment.bundleID), start: start, days: days, seed: seed)
                .timelines(customers: customers)
            var driver = ConformanceDriver(target: deployment, clock: clock, faults: faults, seed: seed)
            driver.log = log
            driver.notifications = notifications
            report = try await driver.run(timelines)
            (report.repollsMade, report.repollsSkipped) = deployment.repolls
        } catch {
            await deployment.stop()
            throw error
        }
        await deployment.stop()
        return Outcome(run: self, report: report, start: start, wall: ContinuousClock.now - began, database: deployment.database)
    }

    /// A finished run: its report and what it took.
    public struct Outcome: Sendable {
        public var run: ConformanceRun
        public var report: ConformanceReport
        /// The simulated start.
        public var start: Date
        /// Wall time, from starting the deployment to having removed it.
        public var wall: Duration
        /// The database the run created and dropped.
        public var database: String

        public init(run: ConformanceRun, report: ConformanceReport, start: Date, wall: Duration, database: String) {
            self.run = run
            self.report = report
            self.start = start
            self.wall = wall
            self.database = database
        }

        /// No wrong answer once the system had heard from Apple, no event missing or duplicated:
        /// what the command's exit status says. Late answers, events out of order and unexpected
        /// ones are counted in the table but do not fail a run.
        public var conformant: Bool {
            let total = report.total
            return total.wrong == 0 && total.eventsMissing == 0 && total.eventsDuplicated == 0
        }

        public var wallSeconds: Double { Double(wall.components.seconds) + Double(wall.components.attoseconds) * 1e-18 }

        /// Whether the app received notifications.
        public var notifications: Bool { run.notifications }

        /// The faults' preset name (`custom` for switches no preset has).
        public var faults: String { Faults.Preset.allCases.first { Faults($0) == run.faults }?.rawValue ?? "custom" }

        /// The simulated span, first and last day.
        public var span: String {
            "\(run.days) simulated days (\(Lifecycle.format(start)) → \(Lifecycle.format(start.addingTimeInterval(Double(run.days) * 86_400))))"
        }

        /// What the command prints: the table, then the run's seed, span and wall time; the
        /// disagreements but late answers (a wrong answer, a webhook stream that is not each
        /// expected event once and in order), each with its customer's timeline (all of them with
        /// `verbose`, else the first three); the verdict last.
        public func summary(verbose: Bool) -> String {
            let total = report.total
            let rate = String(format: "%.2f", Double(run.customers) / max(wallSeconds, 0.001))
            let lateness = report.latenessTable
            var lines =
                [report.table, ""] + (lateness.isEmpty ? [] : [lateness, ""]) + [
                    "seed \(run.seed), \(run.customers) customers, \(span), faults \(faults)",
                    "wall time \(String(format: "%.1f", wallSeconds)) s (\(rate) customers/s); database \(database), dropped",
                    "the driver's time: \(report.phases.description)",
                    (notifications ? "" : "no notifications (the app has no URL); ") + report.repollsLine,
                ] + (report.killsLine.map { [$0] } ?? []) + (report.unseenByPollsLine.map { [$0] } ?? [])
                + (report.lapsedAfterEndLine.map { [$0] } ?? [])
            let failing = report.disagreements.filter {
                if case .lateAnswer = $0.kind { return false }
                return true
            }
            let shown = verbose ? failing[...] : failing.prefix(3)
            for disagreement in shown { lines += ["", disagreement.description] }
            if shown.count < failing.count { lines += ["", "(\(failing.count - shown.count) more disagreements: --verbose prints them all)"] }
            lines.append("")
            lines.append(
                conformant
                    ? "conformant: no wrong answer after convergence, no event missing or duplicated"
                    : "NOT conformant: \(total.wrong) wrong answers after convergence, \(total.eventsMissing) events missing, "
                        + "\(total.eventsDuplicated) duplicated")
            return lines.joined(separator: "\n")
        }

        /// The run as JSON (`--json`): its arguments, wall time, customers per second of wall
        /// time, the verdict, and the table's counts in total and per scenario.
        public var json: JSONValue {
            .object([
                "customers": .number(Double(run.customers)), "days": .number(Double(run.days)), "faults": .string(faults),
                "seed": .string(String(run.seed)), "wall_s": .number((wallSeconds * 10).rounded() / 10),
                "customers_per_wall_s": .number((Double(run.customers) / max(wallSeconds, 0.001) * 100).rounded() / 100),
                "conformant": .bool(conformant), "total": report.total.json,
                "worker_kills": .number(Double(report.workerKills.count)),
                "jobs_taken_back": .number(Double(report.workerKills.reduce(0, +))),
                "worker_kills_empty": .number(Double(report.workerKillsEmpty)),
                "deliveries_repeated": .number(Double(report.repeatedDeliveries)),
                "notifications": .bool(run.notifications), "repolls_made": .number(Double(report.repollsMade)),
                "repolls_skipped": .number(Double(report.repollsSkipped)),
                "lapsed_after_end": .number(Double(report.lapsedAfterEnd)),
                "events_unseen_by_polls": .object([
                    "missing": .number(Double(report.unseenByPolls.missing)), "out_of_order": .number(Double(report.unseenByPolls.outOfOrder)),
                    "unexpected": .number(Double(report.unseenByPolls.unexpected)),
                ]),
                "late_by_fault": .object(
                    Dictionary(
                        uniqueKeysWithValues: report.latenessByKind.map { kind, l in
                            (
                                kind.rawValue,
                                JSONValue.object([
                                    "changes": .number(Double(l.changes)), "never_heard": .number(Double(l.neverHeard)),
                                    "p50_s": .number(l.p50.rounded()), "p99_s": .number(l.p99.rounded()), "max_s": .number(l.max.rounded()),
                                ])
                            )
                        })),
                "scenarios": .object(Dictionary(uniqueKeysWithValues: report.tallies.map { ($0.key.rawValue, $0.value.json) })),
            ])
        }
    }
}

extension ConformanceTally {
    /// The counts, named as the table's columns.
    public var json: JSONValue {
        .object(
            [
                "customers": customers, "answers_checked": answersChecked, "wrong": wrong, "late": late, "events_expected": eventsExpected,
                "events_missing": eventsMissing, "events_duplicated": eventsDuplicated, "events_out_of_order": eventsOutOfOrder,
                "events_unexpected": eventsUnexpected,
            ].mapValues { .number(Double($0)) })
    }
}
