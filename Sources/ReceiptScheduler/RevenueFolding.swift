import BaseSupport
import Foundation
import Logging
import ReceiptCore
import ServiceLifecycle
import Synchronization

/// Folds the revenue rollup's shards of the days workers no longer write (issue 43): each past
/// day's sixteen rows per app and currency become one, so reading a year of figures, the levels
/// before it and each metrics scrape costs one row per day and currency whatever the write
/// concurrency was. A write that still reaches a folded day (a late notification, an old purchase
/// seen for the first time) lands in a shard again and is folded by the next run.
///
/// No lock is needed between scheduler replicas: two folds of one day add each shard once (see
/// ``RevenueShardFolding``). It runs on start and every `interval`, a batch of groups per
/// statement with a pause between batches.
public final class RevenueFolding: Service, Sendable {
    /// Folding settings.
    public struct Configuration: Sendable {
        /// How often it runs.
        public var interval: Duration
        /// (app, day, currency) groups per statement.
        public var batchSize: Int
        /// The pause between two batches.
        public var batchPause: Duration
        /// Days before today (UTC) that stay sharded: the days workers still write.
        public var openDays: Int

        /// Creates a configuration (defaults: hourly, 500 groups a batch, 50 ms between batches,
        /// today and the two days before it stay sharded).
        public init(interval: Duration = .seconds(3600), batchSize: Int = 500, batchPause: Duration = .milliseconds(50), openDays: Int = 2) {
            self.interval = interval
            self.batchSize = max(1, batchSize)
            self.batchPause = batchPause
            self.openDays = max(0, openDays)
        }
    }

    private let configuration: Configuration
    private let make: @Sendable () throws -> any RevenueShardFolding
    private let now: @Sendable () -> Date
    private let logger: Logger
    private let stopping = Atomic<Bool>(false)

    /// Creates the step.
    /// - Parameters:
    ///   - make: builds its Postgres side, on its own thread.
    ///   - now: the injected clock.
    public init(
        configuration: Configuration = Configuration(), make: @escaping @Sendable () throws -> any RevenueShardFolding,
        now: @escaping @Sendable () -> Date = { Date() }, logger: Logger
    ) {
        self.configuration = configuration
        self.make = make
        self.now = now
        self.logger = logger
    }

    public func run() async throws {
        await withTaskCancellationOrGracefulShutdownHandler {
            // Blocking libpq calls: a thread of its own, as the scheduler's loop.
            await NamedThread.run("receiptq.revenue-folding") { self.loop() }
        } onCancelOrGracefulShutdown: {
            self.stopping.store(true, ordering: .relaxed)
        }
    }

    private func loop() {
        PeriodicStep.loop(
            every: configuration.interval, stopping: stopping, failure: "Revenue folding failed",
            logger: logger, make: make
        ) { folding in
            let groups = try fold(folding)
            if groups > 0 { logger.info("Revenue figures folded", metadata: ["revenue.groups_folded": "\(groups)"]) }
        }
    }

    /// One run: folds every due group, a batch at a time, and returns how many it folded.
    public func fold(_ folding: any RevenueShardFolding) throws -> Int {
        let before = RevenueCalendar.text(now().addingTimeInterval(-Double(configuration.openDays) * 86_400))
        var total = 0
        var first = true
        while !stopping.load(ordering: .relaxed) {
            if !first, configuration.batchPause > .zero { usleep(UInt32(configuration.batchPause.seconds * 1_000_000)) }
            first = false
            let folded = try folding.foldShards(before: before, limit: configuration.batchSize)
            total += folded
            if folded < configuration.batchSize { break }
        }
        return total
    }
}
