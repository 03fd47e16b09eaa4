import BaseSupport
import Foundation
import Logging
import Metrics
import ReceiptCore
import ServiceLifecycle
import Synchronization

/// Drops what retention no longer keeps (issue 44): every ``RetentionKind``'s expired rows in
/// Postgres, a batch at a time with a pause between batches, and the dead letters in Redis.
///
/// Each batch is one short statement (its own transaction), so the locks it takes last one batch,
/// never the backlog. Any number of scheduler replicas may run it: a run happens under Postgres's
/// advisory lock (``ExpiredRows/exclusively(_:)``) and a replica that finds it taken skips the run.
/// It runs on start and every `interval`; a run deletes at most `maxBatchesPerKind` batches of a
/// kind and leaves the rest to the next run.
public final class RetentionSweep: Service, Sendable {
    /// Sweep settings.
    public struct Configuration: Sendable {
        /// The days per kind.
        public var policy: RetentionPolicy
        /// How often it runs.
        public var interval: Duration
        /// Rows per delete.
        public var batchSize: Int
        /// The pause between two batches.
        public var batchPause: Duration
        /// The most batches of one kind per run.
        public var maxBatchesPerKind: Int

        /// Creates a configuration (defaults: the documented days, hourly, 1,000 rows per batch,
        /// 50 ms between batches, at most 1,000 batches of a kind per run).
        public init(
            policy: RetentionPolicy = RetentionPolicy(), interval: Duration = .seconds(3600), batchSize: Int = 1000,
            batchPause: Duration = .milliseconds(50), maxBatchesPerKind: Int = 1000
        ) {
            self.policy = policy
            self.interval = interval
            self.batchSize = max(1, batchSize)
            self.batchPause = batchPause
            self.maxBatchesPerKind = max(1, maxBatchesPerKind)
        }
    }

    /// What one run did.
    public struct Report: Sendable, Equatable {
        /// Rows (or dead letters) deleted, by kind.
        public var deleted: [RetentionKind: Int] = [:]
        /// Time partitions dropped whole, by kind.
        public var partitionsDropped: [RetentionKind: Int] = [:]
        /// Time partitions created ahead.
        public var partitionsCreated = 0
        /// Another replica held the lock: nothing was done.
        public var skipped = false
    }

    private let configuration: Configuration
    private let make: @Sendable () throws -> (rows: any ExpiredRows, deadLetters: any DeadLetterTrim)
    private let now: @Sendable () -> Date
    private let logger: Logger
    private let stopping = Atomic<Bool>(false)
    private let lastRun: Gauge
    /// `receiptq_retention_rows_deleted_total`, one per kind, made up front: a kind with nothing
    /// to delete yet shows 0, not a missing series.
    private let deleted: [RetentionKind: Counter]
    private let partitionsDropped: [RetentionKind: Counter]
    private let partitionsCreated: Counter

    /// Creates the step.
    /// - Parameters:
    ///   - make: builds its Postgres and Redis sides, on its own thread.
    ///   - now: the injected clock.
    ///   - metrics: where `receiptq_retention_rows_deleted_total{kind}` and
    ///     `receiptq_retention_last_run_timestamp_seconds` go.
    public init(
        configuration: Configuration = Configuration(),
        make: @escaping @Sendable () throws -> (rows: any ExpiredRows, deadLetters: any DeadLetterTrim),
        now: @escaping @Sendable () -> Date = { Date() }, metrics: any MetricsFactory = MetricsSystem.factory, logger: Logger
    ) {
        self.configuration = configuration
        self.make = make
        self.now = now
        self.logger = logger
        lastRun = Gauge(label: "receiptq_retention_last_run_timestamp_seconds", factory: metrics)
        deleted = Dictionary(
            uniqueKeysWithValues: RetentionKind.allCases.map { kind in
                (kind, Counter(label: "receiptq_retention_rows_deleted_total", dimensions: [("kind", kind.rawValue)], factory: metrics))
            })
        partitionsDropped = Dictionary(
            uniqueKeysWithValues: [RetentionKind.appleCallAttempts, .auditLog].map { kind in
                (kind, Counter(label: "receiptq_retention_partitions_dropped_total", dimensions: [("kind", kind.rawValue)], factory: metrics))
            })
        partitionsCreated = Counter(label: "receiptq_retention_partitions_created_total", factory: metrics)
    }

    public func run() async throws {
        await withTaskCancellationOrGracefulShutdownHandler {
            // Blocking libpq and hiredis calls: a thread of its own, as the scheduler's loop.
            await NamedThread.run("receiptq.retention") { self.loop() }
        } onCancelOrGracefulShutdown: {
            self.stopping.store(true, ordering: .relaxed)
        }
    }

    private func loop() {
        PeriodicStep.loop(
            every: configuration.interval, stopping: stopping, failure: "Retention step failed",
            logger: logger, make: make
        ) { sides in
            let report = try sweep(rows: sides.rows, deadLetters: sides.deadLetters)
            let total = report.deleted.values.reduce(0, +)
            if total > 0 {
                logger.info(
                    "Retention deleted expired data",
                    metadata: .init(uniqueKeysWithValues: report.deleted.map { ("retention.\($0.key.rawValue)", "\($0.value)") }))
            }
        }
    }

    /// One run over every kind, unless another replica holds the lock.
    public func sweep(rows: any ExpiredRows, deadLetters: any DeadLetterTrim) throws -> Report {
        var report = Report()
        let at = now()
        let ran = try rows.exclusively {
            // Ahead first: a late partition only sends rows to the DEFAULT one, never refuses them.
            report.partitionsCreated = try rows.createPartitions(policy: configuration.policy, now: at)
            if report.partitionsCreated > 0 { partitionsCreated.increment(by: report.partitionsCreated) }
            for kind in RetentionKind.allCases where !stopping.load(ordering: .relaxed) {
                // Whole partitions first (a catalog change, no row read); the batches then take
                // what is left: the rows of partitions an app still keeps, and the legacy one's.
                let dropped = try rows.dropExpiredPartitions(kind, policy: configuration.policy, now: at)
                if dropped > 0 {
                    report.partitionsDropped[kind] = dropped
                    partitionsDropped[kind]?.increment(by: dropped)
                }
                report.deleted[kind] = try drain(kind, rows: rows, deadLetters: deadLetters, at: at)
            }
        }
        report.skipped = !ran
        if ran { lastRun.record(at.timeIntervalSince1970) }
        return report
    }

    /// Deletes `kind`'s expired data batch by batch, pausing between batches, until a batch
    /// comes back short or the run's cap is reached.
    private func drain(_ kind: RetentionKind, rows: any ExpiredRows, deadLetters: any DeadLetterTrim, at: Date) throws -> Int {
        var total = 0
        for batch in 0..<configuration.maxBatchesPerKind where !stopping.load(ordering: .relaxed) {
            if batch > 0, configuration.batchPause > .zero { usleep(UInt32(configuration.batchPause.seconds * 1_000_000)) }
            let deleted: Int
            switch kind {
            case .deadLetters:
                // One Redis set for every app: the deployment's days only.
                guard let cutoff = configuration.policy.cutoff(kind, now: at) else { return 0 }
                deleted = try deadLetters.trimDeadLetters(before: cutoff, limit: configuration.batchSize)
            case .appleCallAttempts, .notifications, .events, .webhookDeliveries, .auditLog, .supersededReceipts:
                deleted = try rows.deleteBatch(kind, policy: configuration.policy, now: at, limit: configuration.batchSize)
            }
            total += deleted
            // Per batch: a long catch-up shows its progress.
            if deleted > 0 { self.deleted[kind]?.increment(by: deleted) }
            if deleted < configuration.batchSize { break }
        }
        return total
    }
}
