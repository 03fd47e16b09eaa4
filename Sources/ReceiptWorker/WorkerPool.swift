import Dispatch
import Foundation
import Logging
import ReceiptCore
import ServiceLifecycle
import Synchronization

/// The worker pool: `concurrency` lanes, each a loop on its own Dispatch queue that owns its own
/// Redis, Postgres and curl handles, so the C libraries' blocking calls never touch the cooperative pool.
///
/// ```swift
/// let pool = WorkerPool(configuration: .init(concurrency: 16), makeLane: { index in try makeLane(index) }, logger: logger)
/// try await ServiceGroup(services: [pool], logger: logger).run()
/// ```
///
/// Graceful shutdown stops reserving; each lane finishes its job in hand. A lane still busy at the
/// deadline is left alone: its job stays in its processing list, where the janitor finds it once the
/// heartbeat lapses. Nothing is lost either way.
public final class WorkerPool: Service, Sendable {
    /// Pool settings.
    public struct Configuration: Sendable {
        /// Lanes (jobs in flight) in this process.
        public var concurrency: Int
        /// How long one reserve blocks; short, so shutdown is noticed quickly (Sidekiq uses 2 s).
        public var reserveTimeout: Duration
        /// How long graceful shutdown waits for jobs in hand.
        public var shutdownTimeout: Duration
        /// How often a lane refreshes its heartbeat.
        public var heartbeatInterval: Duration
        /// Backoff and give-up rules.
        public var retryPolicy: RetryPolicy

        /// Creates a configuration; every value has a production default.
        public init(
            concurrency: Int = 16, reserveTimeout: Duration = .seconds(2), shutdownTimeout: Duration = .seconds(25),
            heartbeatInterval: Duration = .seconds(5), retryPolicy: RetryPolicy = RetryPolicy()
        ) {
            self.concurrency = concurrency
            self.reserveTimeout = reserveTimeout
            self.shutdownTimeout = shutdownTimeout
            self.heartbeatInterval = heartbeatInterval
            self.retryPolicy = retryPolicy
        }
    }

    private let configuration: Configuration
    private let makeLane: @Sendable (Int) throws -> WorkerLane
    private let requeueAbandoned: @Sendable ([Int]) -> Void
    private let now: @Sendable () -> Date
    private let logger: Logger
    private let stopping = Atomic<Bool>(false)
    private let processed = Atomic<Int>(0)
    private let running = Mutex<Set<Int>>([])
    private let finished = Mutex<CheckedContinuation<Void, Never>?>(nil)

    /// Creates a pool.
    /// - Parameters:
    ///   - configuration: pool settings.
    ///   - makeLane: builds lane `index`'s resources, on that lane's own thread; retried with backoff when it fails.
    ///   - requeueAbandoned: called once graceful shutdown's deadline passed with the lanes still
    ///     busy; it must put their in-flight jobs back on the queue (on its own connection: the
    ///     lanes' own are blocked).
    ///   - now: the injected clock.
    ///   - logger: where the pool logs.
    public init(
        configuration: Configuration, makeLane: @escaping @Sendable (Int) throws -> WorkerLane,
        requeueAbandoned: @escaping @Sendable ([Int]) -> Void = { _ in }, now: @escaping @Sendable () -> Date = { Date() },
        logger: Logger
    ) {
        self.configuration = configuration
        self.makeLane = makeLane
        self.requeueAbandoned = requeueAbandoned
        self.now = now
        self.logger = logger
    }

    /// Jobs finished (any outcome) since start; for tests and the benchmark.
    public var processedCount: Int { processed.load(ordering: .relaxed) }

    public func run() async throws {
        let group = DispatchGroup()
        running.withLock { $0 = Set(0..<configuration.concurrency) }
        for index in 0..<configuration.concurrency {
            group.enter()
            DispatchQueue(label: "receiptq.worker.\(index)").async {
                self.runLane(index)
                _ = self.running.withLock { $0.remove(index) }
                group.leave()
            }
        }
        logger.info("Worker pool started", metadata: ["worker.concurrency": "\(configuration.concurrency)"])
        await withTaskCancellationOrGracefulShutdownHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                finished.withLock { $0 = continuation }
                group.notify(queue: .global()) { self.finish() }
            }
        } onCancelOrGracefulShutdown: {
            self.stopping.store(true, ordering: .relaxed)
            let deadline = DispatchTime.now() + .milliseconds(Int(self.configuration.shutdownTimeout.seconds * 1000))
            DispatchQueue.global().asyncAfter(deadline: deadline) { self.abandonBusyLanes() }
        }
        logger.info("Worker pool stopped")
    }

    /// Resumes `run()` once, whichever comes first: every lane finished, or the deadline passed.
    private func finish() {
        finished.withLock { continuation in
            continuation?.resume()
            continuation = nil
        }
    }

    /// The deadline passed: give the jobs of lanes still blocked in a call back to the queue, so a
    /// restart picks them up at once instead of after the heartbeat lapses (Sidekiq's
    /// hard_shutdown). If such a lane still finishes its job, the replay is a no-op.
    private func abandonBusyLanes() {
        let busy = running.withLock { $0 }
        guard !busy.isEmpty else { return }
        logger.warning("Shutdown deadline passed; requeueing the jobs in hand", metadata: ["worker.lanes": "\(busy.sorted())"])
        requeueAbandoned(busy.sorted())
        finish()
    }

    /// Asks the lanes to stop after their current job (also what graceful shutdown does).
    public func stop() { stopping.store(true, ordering: .relaxed) }

    private var isStopping: Bool { stopping.load(ordering: .relaxed) }

    private func runLane(_ index: Int) {
        var logger = self.logger
        logger[metadataKey: "worker.lane"] = "\(index)"
        var rng = SystemRandomNumberGenerator()
        var pause = 0.1
        var lane: WorkerLane?
        var lastHeartbeat = Date.distantPast
        let processor = JobProcessor(retryPolicy: configuration.retryPolicy, now: now)
        while !isStopping {
            do {
                if lane == nil { lane = try makeLane(index) }
                guard let lane else { continue }
                if now().timeIntervalSince(lastHeartbeat) >= configuration.heartbeatInterval.seconds {
                    try lane.queue.heartbeat(busy: 0)
                    lastHeartbeat = now()
                }
                guard let job = try lane.queue.reserve(timeout: configuration.reserveTimeout) else { continue }
                _ = try processor.process(job, on: lane, logger: logger, using: &rng)
                processed.add(1, ordering: .relaxed)
                pause = 0.1
            } catch {
                // Redis or Postgres unreachable: back off (bounded), keep the lane, try again. The
                // façades reconnect on the next call, and the queue gives back the job a failed call
                // left in this lane's processing list before it reserves the next one.
                logger.warning("Worker lane error", metadata: ["error": "\(error)"])
                sleepUnlessStopping(pause)
                pause = min(pause * 2, 5)
            }
        }
    }

    private func sleepUnlessStopping(_ seconds: Double) {
        let end = Date().addingTimeInterval(seconds)
        while !isStopping, Date() < end { usleep(50_000) }
    }
}
