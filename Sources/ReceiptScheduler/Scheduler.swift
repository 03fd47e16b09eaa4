import Dispatch
import Foundation
import Logging
import ReceiptCore
import ServiceLifecycle
import Synchronization

/// `receiptq schedule`: promotes due retries and requeues the jobs of dead workers, on a timer.
///
/// Safe to run as several replicas: promotion is one atomic Lua script per batch, and a requeue
/// moves each job with one LMOVE.
public final class Scheduler: Service, Sendable {
    /// Scheduler settings.
    public struct Configuration: Sendable {
        /// How often retries are promoted.
        public var tickInterval: Duration
        /// How often the janitor looks for dead workers.
        public var janitorInterval: Duration

        /// Creates a configuration (defaults: 1 s ticks, janitor every 15 s).
        public init(tickInterval: Duration = .seconds(1), janitorInterval: Duration = .seconds(15)) {
            self.tickInterval = tickInterval
            self.janitorInterval = janitorInterval
        }
    }

    private let configuration: Configuration
    private let makeMaintenance: @Sendable () throws -> any QueueMaintenance
    private let now: @Sendable () -> Date
    private let logger: Logger
    private let stopping = Atomic<Bool>(false)

    /// Creates a scheduler.
    /// - Parameters:
    ///   - configuration: timings.
    ///   - makeMaintenance: builds the chores' connection, on the scheduler's own thread.
    ///   - now: the injected clock.
    ///   - logger: where it logs.
    public init(
        configuration: Configuration = Configuration(), makeMaintenance: @escaping @Sendable () throws -> any QueueMaintenance,
        now: @escaping @Sendable () -> Date = { Date() }, logger: Logger
    ) {
        self.configuration = configuration
        self.makeMaintenance = makeMaintenance
        self.now = now
        self.logger = logger
    }

    public func run() async throws {
        await withTaskCancellationOrGracefulShutdownHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                DispatchQueue(label: "receiptq.scheduler").async {
                    self.loop()
                    continuation.resume()
                }
            }
        } onCancelOrGracefulShutdown: {
            self.stopping.store(true, ordering: .relaxed)
        }
    }

    private func loop() {
        var maintenance: (any QueueMaintenance)?
        var lastJanitor = Date.distantPast
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
                logger.warning("Scheduler tick failed", metadata: ["error": "\(error)"])
            }
            let end = Date().addingTimeInterval(configuration.tickInterval.seconds)
            while !stopping.load(ordering: .relaxed), Date() < end { usleep(50_000) }
        }
    }
}
