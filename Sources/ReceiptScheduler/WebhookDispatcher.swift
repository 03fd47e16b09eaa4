import BaseSupport
import Foundation
import Logging
import Metrics
import ReceiptCore
import ServiceLifecycle
import Synchronization

/// Moves webhook deliveries from the events outbox (Postgres) to the webhook queue (Redis), each
/// once, in order per endpoint and ordering key: a delivery is queued only when every earlier one
/// of its user (or subscription) to its endpoint is settled, so the workers may deliver thousands
/// at once without ever reordering one user's events.
///
/// **Nothing is lost.** The claim, the enqueue and the mark are one Postgres transaction around
/// one Redis script: a crash before the commit leaves the deliveries pending to be claimed again,
/// and the script's per-delivery marker makes that second enqueue a no-op. A job Redis loses
/// after the commit (a failover without `REDIS_MIN_REPLICAS_ACK`, a restart that lost its last
/// second) takes its marker with it: every `requeueAfter` each delivery still `queued` is looked
/// at again, queued again if its marker is gone, and its marker kept alive if not.
///
/// Safe to run as several replicas (`FOR UPDATE SKIP LOCKED`). Polls every `interval` while there
/// is work (at once while batches come back full), backing off to `idleInterval` while idle.
public final class WebhookDispatcher: Service, Sendable {
    /// Dispatcher settings.
    public struct Configuration: Sendable {
        /// The pause after a claim that found work.
        public var interval: Duration
        /// The longest pause of an idle outbox: each empty claim doubles the pause up to it, so an
        /// idle deployment (or a test process running dozens) costs Postgres little.
        public var idleInterval: Duration
        /// Deliveries per claim.
        public var batch: Int
        /// How long a delivery stays `queued` before its job is looked for in Redis
        /// (`WEBHOOK_REQUEUE_AFTER_SECONDS`): how late a delivery Redis lost is sent.
        public var requeueAfter: Duration

        /// Creates a configuration (defaults: 100 ms after work, up to 1 s idle, 500 per claim,
        /// deliveries queued for 10 minutes looked for).
        public init(
            interval: Duration = .milliseconds(100), idleInterval: Duration = .seconds(1), batch: Int = 500,
            requeueAfter: Duration = .seconds(600)
        ) {
            self.interval = interval
            self.idleInterval = max(interval, idleInterval)
            self.batch = max(1, batch)
            self.requeueAfter = max(.seconds(1), requeueAfter)
        }

        /// How often the queued deliveries are looked at: often enough that none waits much past
        /// `requeueAfter`, and at least once a minute.
        var recheckInterval: Duration { min(max(requeueAfter / 4, .milliseconds(250)), .seconds(60)) }
    }

    private let configuration: Configuration
    private let make: @Sendable () throws -> (outbox: any WebhookOutbox, queue: any WebhookQueue)
    private let now: @Sendable () -> Date
    private let logger: Logger
    private let stopping = Atomic<Bool>(false)
    private let dispatched: Counter
    private let requeued: Counter
    private let paused: Gauge

    /// Creates a dispatcher.
    /// - Parameters:
    ///   - make: builds its Postgres and Redis sides, on its own thread (again after a failure).
    ///   - now: the injected clock.
    ///   - metrics: where queued deliveries are counted.
    public init(
        configuration: Configuration = Configuration(), make: @escaping @Sendable () throws -> (outbox: any WebhookOutbox, queue: any WebhookQueue),
        now: @escaping @Sendable () -> Date = { Date() }, metrics: any MetricsFactory = MetricsSystem.factory, logger: Logger
    ) {
        self.configuration = configuration
        self.make = make
        self.now = now
        self.logger = logger
        dispatched = Counter(label: "receiptq_webhook_deliveries_queued_total", factory: metrics)
        requeued = Counter(label: "receiptq_webhook_deliveries_requeued_total", factory: metrics)
        paused = Gauge(label: "receiptq_webhook_endpoints_paused", factory: metrics)
    }

    public func run() async throws {
        await withTaskCancellationOrGracefulShutdownHandler {
            // A thread of its own for a loop that lives as long as the service (libdispatch's
            // shared pool is for short work).
            await NamedThread.run("receiptq.outbox") { self.loop() }
        } onCancelOrGracefulShutdown: {
            self.stopping.store(true, ordering: .relaxed)
        }
    }

    private func loop() {
        var sides: (outbox: any WebhookOutbox, queue: any WebhookQueue)?
        var pause = configuration.interval.seconds
        var lastCount = ContinuousClock.now - .seconds(3600)
        var lastRecheck = ContinuousClock.now
        var pausedBefore = 0
        while !stopping.load(ordering: .relaxed) {
            do {
                if sides == nil { sides = try make() }
                guard let sides else { continue }
                if ContinuousClock.now - lastCount >= .seconds(15) {
                    let count = try sides.outbox.pausedEndpoints()
                    paused.record(count)
                    if count > pausedBefore {
                        logger.error(
                            "Webhook endpoints paused: their events wait until `receiptq webhooks resume`",
                            metadata: ["webhook.endpoints_paused": "\(count)"])
                    }
                    pausedBefore = count
                    lastCount = .now
                }
                if ContinuousClock.now - lastRecheck >= configuration.recheckInterval {
                    try recheckQueued(sides)
                    lastRecheck = .now
                }
                let queued = try dispatchOnce(sides)
                if queued == configuration.batch { continue }
                pause = queued > 0 ? configuration.interval.seconds : min(pause * 2, configuration.idleInterval.seconds)
            } catch {
                // Postgres or Redis unreachable: back off (bounded); the deliveries stay pending.
                logger.warning("Webhook dispatch failed", error: error)
                sides = nil
                pause = min(max(pause * 2, configuration.interval.seconds), 5)
            }
            sleep(pause)
        }
    }

    /// One claim: returns how many deliveries were queued.
    @discardableResult
    public func dispatchOnce(_ sides: (outbox: any WebhookOutbox, queue: any WebhookQueue)) throws -> Int {
        let at = now()
        let queued = try sides.outbox.claimPending(limit: configuration.batch) { try sides.queue.enqueue($0, at: at) }
        if queued > 0 { dispatched.increment(by: queued) }
        return queued
    }

    /// Looks for the jobs of deliveries queued longer than `requeueAfter` (a batch at a time,
    /// ten at most in one go); returns how many were queued again.
    @discardableResult
    public func recheckQueued(_ sides: (outbox: any WebhookOutbox, queue: any WebhookQueue)) throws -> Int {
        var total = 0
        for _ in 0..<10 {
            let at = now()
            let (checked, again) = try sides.outbox.recheckQueued(olderThan: configuration.requeueAfter, limit: configuration.batch) {
                try sides.queue.requeueLost($0, at: at)
            }
            total += again
            if checked < configuration.batch { break }
        }
        if total > 0 {
            requeued.increment(by: total)
            logger.warning(
                "Webhook deliveries queued again: Redis had lost their jobs (a failover or restart)",
                metadata: ["webhook.requeued": "\(total)"])
        }
        return total
    }

    private func sleep(_ seconds: Double) {
        let end = Date().addingTimeInterval(seconds)
        while !stopping.load(ordering: .relaxed), Date() < end { usleep(20_000) }
    }
}
