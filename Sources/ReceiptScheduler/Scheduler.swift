import BaseSupport
import Foundation
import Logging
import Metrics
import ReceiptCore
import ServiceLifecycle
import Synchronization

/// `receiptq schedule`: promotes due retries, requeues the jobs of dead workers, and queues the
/// re-polls of subscriptions that are due, on a timer.
///
/// Safe to run as several replicas: promotion is one atomic Lua script per batch, a requeue moves
/// each job with one script (`rescue_orphan`: out of the dead lane and queued, or buried, atomically),
/// and re-polls are claimed with `FOR UPDATE SKIP LOCKED` (``Repoller``).
public final class Scheduler: Service, Sendable {
    /// Scheduler settings.
    public struct Configuration: Sendable {
        /// How often retries are promoted and due re-polls claimed (`SCHEDULER_TICK_MS`).
        public var tickInterval: Duration
        /// How often the janitor looks for dead workers.
        public var janitorInterval: Duration
        /// Subscriptions per re-poll claim.
        public var repollBatch: Int
        /// The fallback poll delay after a claim (see ``Repoller/lease``).
        public var repollLease: Duration
        /// How often the due re-polls are counted for `receiptq_repolls_due` (one index scan each).
        public var dueCountInterval: Duration
        /// Which due subscriptions Server Notifications V2 cover (skipped until their safety net).
        public var safetyNet: RepollSafetyNet

        /// Creates a configuration (defaults: 1 s ticks, janitor every 15 s, re-polls in batches
        /// of 500 with a 73 h lease: longer than the default retry budget; due re-polls counted
        /// every 15 s; ``RepollSafetyNet``'s defaults).
        public init(
            tickInterval: Duration = .seconds(1), janitorInterval: Duration = .seconds(15), repollBatch: Int = 500,
            repollLease: Duration = .seconds(73 * 3600), dueCountInterval: Duration = .seconds(15),
            safetyNet: RepollSafetyNet = RepollSafetyNet()
        ) {
            self.tickInterval = tickInterval
            self.janitorInterval = janitorInterval
            self.repollBatch = repollBatch
            self.repollLease = repollLease
            self.dueCountInterval = dueCountInterval
            self.safetyNet = safetyNet
        }
    }

    private let configuration: Configuration
    private let makeMaintenance: @Sendable () throws -> any QueueMaintenance
    private let makeRepolls: (@Sendable () throws -> (schedule: any SubscriptionSchedule, queue: any RepollQueue))?
    private let now: @Sendable () -> Date
    private let repollNow: @Sendable () -> Date
    private let logger: Logger
    private let stopping = Atomic<Bool>(false)
    private let repollsEnqueued: Counter
    private let repollsDue: Gauge
    private let metrics: any MetricsFactory

    /// Creates a scheduler.
    /// - Parameters:
    ///   - configuration: timings.
    ///   - makeMaintenance: builds the chores' connection, on the scheduler's own thread.
    ///   - makeRepolls: builds the re-poll step's Postgres and Redis sides (nil: no re-polls).
    ///   - now: the injected clock of the queue's chores: retry promotion, the janitor, and the
    ///     re-poll jobs' enqueue time and rate budget. Retry times (Apple's `Retry-After`, the
    ///     backoff) are the machine's, so this clock must move as the machine's does: one that
    ///     jumped a day would promote every retry at once.
    ///   - repollNow: the clock the re-poll claims read (which subscriptions are due, their lease,
    ///     the safety net's freshness): the clock the worker plans subscriptions' polls on
    ///     (``JobPlanner/observedAt``); nil: `now`, as in production, where both are the machine's.
    ///     The conformance suite's deployment gives its simulated clock, so its jumps make polls due.
    ///   - metrics: where re-polls queued and due are reported (default: the process's
    ///     bootstrapped swift-metrics backend).
    ///   - logger: where it logs.
    public init(
        configuration: Configuration = Configuration(), makeMaintenance: @escaping @Sendable () throws -> any QueueMaintenance,
        makeRepolls: (@Sendable () throws -> (schedule: any SubscriptionSchedule, queue: any RepollQueue))? = nil,
        now: @escaping @Sendable () -> Date = { Date() }, repollNow: (@Sendable () -> Date)? = nil,
        metrics: any MetricsFactory = MetricsSystem.factory, logger: Logger
    ) {
        self.configuration = configuration
        self.makeMaintenance = makeMaintenance
        self.makeRepolls = makeRepolls
        self.now = now
        self.repollNow = repollNow ?? now
        self.logger = logger
        repollsEnqueued = Counter(label: "receiptq_repolls_enqueued_total", factory: metrics)
        repollsDue = Gauge(label: "receiptq_repolls_due", factory: metrics)
        self.metrics = metrics
    }

    public func run() async throws {
        await withTaskCancellationOrGracefulShutdownHandler {
            // A thread of its own for a loop that lives as long as the service.
            await NamedThread.run("receiptq.sched") { self.loop() }
        } onCancelOrGracefulShutdown: {
            self.stopping.store(true, ordering: .relaxed)
        }
    }

    private func loop() {
        var maintenance: (any QueueMaintenance)?
        var repoller: Repoller?
        var lastJanitor = Date.distantPast
        // Pacing uses the machine's clock: an injected clock that stands still would stop the counts.
        var lastDueCount: ContinuousClock.Instant?
        var rng = SystemRandomNumberGenerator()
        // `receiptq_repolls_total`, one counter per app and outcome, made as apps show up.
        var perApp: [String: Counter] = [:]
        func count(_ counts: [UUID: Int], _ outcome: String) {
            for (app, n) in counts where n > 0 {
                let key = "\(app)\u{0}\(outcome)"
                let counter =
                    perApp[key]
                    ?? Counter(label: "receiptq_repolls_total", dimensions: [("app", app.canonical), ("outcome", outcome)], factory: metrics)
                perApp[key] = counter
                counter.increment(by: n)
            }
        }
        while !stopping.load(ordering: .relaxed) {
            do {
                if maintenance == nil { maintenance = try makeMaintenance() }
                guard let maintenance else { continue }
                // Drain in batches so a backlog after an outage moves quickly, without one huge script.
                while try maintenance.promoteDueRetries(now: now(), limit: 500) == 500 {}
                if now().timeIntervalSince(lastJanitor) >= configuration.janitorInterval.seconds {
                    let requeued = try maintenance.requeueOrphans()
                    if requeued > 0 { logger.info("Requeued jobs of dead workers", metadata: ["jobs.count": "\(requeued)"]) }
                    lastJanitor = now()
                }
            } catch {
                logger.warning("Scheduler tick failed", error: error)
            }
            // Apart from the Redis chores: a Postgres outage must not hold back retry promotion.
            if let makeRepolls {
                do {
                    if repoller == nil {
                        let (schedule, queue) = try makeRepolls()
                        repoller = Repoller(
                            schedule: schedule, queue: queue, batchSize: configuration.repollBatch, lease: configuration.repollLease,
                            safetyNet: configuration.safetyNet)
                    }
                    // Bounded per tick so that promotion and the janitor keep their pace during a
                    // backlog; the global budget bounds it across replicas anyway.
                    let tally =
                        try repoller?.drain(now: repollNow(), queuedAt: now(), limit: 20 * configuration.repollBatch, using: &rng)
                        ?? RepollTally()
                    count(tally.made, "made")
                    count(tally.skipped, "skipped")
                    let queued = tally.queued
                    let skipped = tally.skipped.values.reduce(0, +)
                    if queued > 0 { repollsEnqueued.increment(by: queued) }
                    if queued > 0 || skipped > 0 {
                        logger.debug(
                            "Queued subscription re-polls", metadata: ["repolls.count": "\(queued)", "repolls.skipped": "\(skipped)"])
                    }
                    if let repoller, lastDueCount.map({ ContinuousClock.now - $0 >= configuration.dueCountInterval }) ?? true {
                        repollsDue.record(try repoller.countDue(now: repollNow()))
                        lastDueCount = .now
                    }
                } catch {
                    logger.warning("Re-poll step failed", error: error)
                }
            }
            let end = Date().addingTimeInterval(configuration.tickInterval.seconds)
            while !stopping.load(ordering: .relaxed), Date() < end { usleep(50_000) }
        }
    }
}
