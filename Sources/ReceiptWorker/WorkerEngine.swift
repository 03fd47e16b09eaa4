import BaseSupport
import Dispatch
import Foundation
import Logging
import Metrics
import ReceiptCore
import ServiceLifecycle
import Synchronization

/// What a worker thread stores into: validations (``ReceiptStore``), webhook deliveries
/// (``DeliveryLog``) and answers to consumption requests (``RefundDefenceLog``), ports that one
/// Postgres connection serves in production.
public typealias WorkerStore = ReceiptStore & DeliveryLog & RefundDefenceLog

/// The worker: `concurrency` validations in flight in one process on a handful of threads.
///
/// ```swift
/// let engine = WorkerEngine(configuration: .init(concurrency: 1000), makeQueue: { try queue($0) },
///                           makeStore: { try store($0) }, verifier: appStore, logger: logger)
/// try await ServiceGroup(services: [engine], logger: logger).run()
/// ```
///
/// **Pipeline.** One *fetcher* thread reserves jobs in batches (as many as there are free slots,
/// and a few ahead) into the process's processing list, asks the local ``CircuitGate`` and starts
/// each call to Apple on the asynchronous verifier (libcurl's multi interface: one thread for every call).
/// Each answer becomes a ``JobPlan`` on the HTTP thread and waits for a *committer*: a few threads,
/// each with its own Postgres and Redis connection, that take every plan waiting (up to
/// `commitBatch`), store them in one Postgres transaction (group commit), then settle them in one
/// Redis round trip.
///
/// **Slots.** `concurrency` bounds the jobs *calling* (from their start to their answer), so calls
/// in flight never exceed it and a call's slot does not wait for its batch's commit: at a 50 ms
/// answer the commit and settlement (5–10 ms) would otherwise idle every slot for a sixth of its
/// time. Answered jobs waiting for their commit are bounded too, by another `concurrency`, so a
/// Postgres outage stops the fetcher after that many instead of filling memory.
///
/// **Imports.** Bulk imports' validations wait in their own queue and are reserved only for room
/// the live queues left in the same reserve, at most `importShare` of the slots; each one's call
/// first takes a token of its app's import budget (`importRatePerSecond`, shared by every
/// process): a token within two seconds is waited for in the slot, a later one sends the job back
/// to the retry set without an attempt and stops this process reserving imports until then.
///
/// **Nothing is lost.** A job leaves the processing list only in its settlement, after the commit;
/// a failed settlement is repeated until it succeeds (a repeat moves nothing twice). A reserve whose
/// reply was lost leaves a job the process does not know of; the fetcher gives such strays back
/// before it reserves again. If the process dies, the janitor requeues its list once the heartbeat
/// lapses.
///
/// **Shutdown.** Graceful shutdown stops reserving and lets the jobs in hand finish. If they have
/// not after `shutdownTimeout`, `requeueAbandoned` gives the whole processing list back to the
/// queue, so that a restart picks the jobs up at once (a job that still finishes is a harmless replay).
public final class WorkerEngine: Service, Sendable {
    /// Engine settings.
    public struct Configuration: Sendable {
        /// Jobs in flight in this process (`WORKER_CONCURRENCY`).
        public var concurrency: Int
        /// The most jobs one reserve takes.
        public var fetchBatch: Int
        /// The most jobs one Postgres transaction stores.
        public var commitBatch: Int
        /// Committer threads (each with one Postgres and one Redis connection).
        public var committers: Int
        /// How long a committer lets a small batch gather more answers (from its first answer),
        /// while calls are still in flight (`WORKER_COMMIT_LINGER_MS`). Slots are freed at the
        /// answer, so this costs a job's result some milliseconds, not throughput, and every
        /// transaction it saves is Postgres CPU: at c100 on two cores, 20 ms (~40 jobs a commit)
        /// against 5 ms (~15) cut Postgres from ~300 to ~215–240 µs per validation (bench/README).
        public var commitLinger: Duration
        /// How long one reserve blocks on an empty queue (on the validations list only: Redis cannot
        /// block on several); short, so shutdown is noticed quickly, and because it is the longest
        /// a notification, a webhook delivery or a re-poll waits at an idle worker: each wait
        /// ends with a look at the other queues (`WORKER_IDLE_WAIT_MS`).
        public var reserveTimeout: Duration
        /// How long graceful shutdown waits for the jobs in hand.
        public var shutdownTimeout: Duration
        /// How often the process refreshes its heartbeat.
        public var heartbeatInterval: Duration
        /// How often the local view of a closed outage circuit is refreshed from Redis.
        public var circuitRefresh: Duration
        /// How often counted outcomes are sent to the shared circuit (one script call each time).
        public var circuitFlush: Duration
        /// Backoff and give-up rules.
        public var retryPolicy: RetryPolicy
        /// When the subscriptions in Apple's answers are polled again.
        public var repollPolicy: RepollPolicy
        /// How many 404/410 answers in a row, across the deployment, mean `verifyReceipt` is gone
        /// (`VERIFY_RECEIPT_GONE_AFTER`): a stray 404 from a proxy must not move every app.
        public var verifyReceiptGoneAfter: Int
        /// The share of `concurrency` bulk imports' validations may hold at most (`IMPORT_SHARE`,
        /// 0…1); they get it only when the live queues leave slots free. 0: imports wait.
        public var importShare: Double
        /// Validations per second each app's imports may start, across the deployment
        /// (`IMPORT_RATE_PER_SECOND`); 0: no budget of their own.
        public var importRatePerSecond: Double

        /// Creates a configuration; every value has a production default.
        public init(
            concurrency: Int = 16, fetchBatch: Int = 128, commitBatch: Int = 128, committers: Int = 2, commitLinger: Duration = .milliseconds(20),
            reserveTimeout: Duration = .milliseconds(100), shutdownTimeout: Duration = .seconds(25), heartbeatInterval: Duration = .seconds(5),
            circuitRefresh: Duration = .milliseconds(250), circuitFlush: Duration = .milliseconds(50),
            retryPolicy: RetryPolicy = RetryPolicy(), repollPolicy: RepollPolicy = RepollPolicy(), verifyReceiptGoneAfter: Int = 20,
            importShare: Double = 0.25, importRatePerSecond: Double = 0
        ) {
            self.importRatePerSecond = importRatePerSecond.isFinite ? max(0, importRatePerSecond) : 0
            self.importShare = importShare.isFinite ? min(1, max(0, importShare)) : 0.25
            self.verifyReceiptGoneAfter = max(1, verifyReceiptGoneAfter)
            self.concurrency = max(1, concurrency)
            self.fetchBatch = max(1, fetchBatch)
            self.commitBatch = max(1, commitBatch)
            self.committers = max(1, committers)
            self.commitLinger = max(.zero, commitLinger)
            self.reserveTimeout = reserveTimeout
            self.shutdownTimeout = shutdownTimeout
            self.heartbeatInterval = heartbeatInterval
            self.circuitRefresh = circuitRefresh
            self.circuitFlush = circuitFlush
            self.retryPolicy = retryPolicy
            self.repollPolicy = repollPolicy
        }
    }

    /// A job whose plan waits for a committer.
    struct Decided {
        var token: Int
        var job: ReservedJob
        var plan: JobPlan
        /// When its answer came (monotonic nanoseconds), for the stage metrics.
        var decidedAt: UInt64
        /// How long its call took, from its start to its answer (the `call` stage).
        var callNanoseconds: UInt64?
    }

    /// Everything the threads share, under one lock.
    struct Shared {
        var nextToken = 0
        var inFlight: [Int: ReservedJob] = [:]
        /// The jobs started and not yet answered (the slots `concurrency` bounds), with when each
        /// started (monotonic nanoseconds, for the stage metrics).
        var calling: [Int: UInt64] = [:]
        var stopping = false
        var fetcherDone = false
        var abandoned = false
        /// A settle failed (a lost connection, a failover): the fetcher reconciles the processing
        /// list with what is in flight once Redis answers it again.
        var reconcileDue = false
        var outcomes: [JobOutcome: Int] = [:]
    }

    let configuration: Configuration
    let makeQueue: @Sendable (String) throws -> any JobQueue
    let makeStore: @Sendable (String) throws -> any WorkerStore
    let makeCircuit: @Sendable () throws -> (any OutageCircuit)?
    let makeWatch: @Sendable () throws -> (any VerifyReceiptWatch)?
    let makeImportBudget: @Sendable () throws -> (any ImportRateBudget)?
    let verifier: any ReceiptVerifier
    let webhooks: (any WebhookSender)?
    let consumption: (any ConsumptionSender)?
    private let requeueAbandoned: @Sendable () -> Void
    /// The shutdown deadline and the end-of-run notice: a queue of its own (its own thread when
    /// due), since the global pool is only as wide as the machine and blocking work elsewhere in
    /// the process can hold it for seconds past a 25-second promise.
    private let timers = DispatchQueue(label: "receiptq.worker.timers")
    let planner: JobPlanner
    let now: @Sendable () -> Date
    let logger: Logger
    let metrics: WorkerMetrics
    /// Guards `shared`; the fetcher waits on it for free slots.
    let condition = NSCondition()
    nonisolated(unsafe) var shared = Shared()
    /// Guards `decided`; only committers wait on it, so a decision wakes one committer and nothing else.
    let decisions = NSCondition()
    nonisolated(unsafe) var decided: [Decided] = []
    /// The settlements made lately, for a reconcile after a failover lost some of them.
    let settledJobs = SettledJobs()
    private let finished = Mutex<CheckedContinuation<Void, Never>?>(nil)

    /// Creates an engine.
    /// - Parameters:
    ///   - configuration: engine settings.
    ///   - makeQueue: a queue for one thread (`"fetcher"`, `"committer-0"`, …), all on this process's
    ///     processing list; called again after a failure.
    ///   - makeStore: a store for one thread; when it fails, that thread's jobs are retried later.
    ///   - makeCircuit: the shared outage circuit on its own connection (nil: none).
    ///   - makeWatch: the shared view of `verifyReceipt`'s lifecycle on its own connection (nil:
    ///     never declared gone; announced dates not recorded).
    ///   - makeImportBudget: the shared per-app budget of imports' calls on its own connection
    ///     (nil: none; used only when `importRatePerSecond` is set).
    ///   - verifier: the asynchronous verifier (Apple, or a mock), shared by every job.
    ///   - webhooks: sends webhook deliveries (nil: a `webhook` job goes to the dead letters).
    ///   - consumption: answers Apple's consumption requests (nil: such a job goes to the dead letters).
    ///   - requeueAbandoned: gives the processing list back to the queue when graceful shutdown's
    ///     deadline passes with jobs still in hand.
    ///   - now: the injected clock of the jobs' own time (validations, retries, heartbeats,
    ///     webhook signatures): the machine's, which the Redis queue's retry set shares.
    ///   - observedAt: the clock subscriptions' polls are planned on (``JobPlanner/observedAt``;
    ///     nil: `now`): the scheduler's re-poll clock. The conformance suite's simulated clock.
    ///   - metrics: where jobs settled, Apple's calls and latencies are counted (default: the
    ///     process's bootstrapped swift-metrics backend).
    ///   - logger: where the engine logs.
    public init(
        configuration: Configuration, makeQueue: @escaping @Sendable (String) throws -> any JobQueue,
        makeStore: @escaping @Sendable (String) throws -> any WorkerStore,
        makeCircuit: @escaping @Sendable () throws -> (any OutageCircuit)? = { nil },
        makeWatch: @escaping @Sendable () throws -> (any VerifyReceiptWatch)? = { nil },
        makeImportBudget: @escaping @Sendable () throws -> (any ImportRateBudget)? = { nil }, verifier: any ReceiptVerifier,
        webhooks: (any WebhookSender)? = nil, consumption: (any ConsumptionSender)? = nil,
        requeueAbandoned: @escaping @Sendable () -> Void = {}, now: @escaping @Sendable () -> Date = { Date() },
        observedAt: (@Sendable () -> Date)? = nil, metrics: any MetricsFactory = MetricsSystem.factory, logger: Logger
    ) {
        self.configuration = configuration
        self.makeQueue = makeQueue
        self.makeStore = makeStore
        self.makeCircuit = makeCircuit
        self.makeWatch = makeWatch
        self.makeImportBudget = makeImportBudget
        self.verifier = verifier
        self.webhooks = webhooks
        self.consumption = consumption
        self.requeueAbandoned = requeueAbandoned
        self.planner = JobPlanner(
            retryPolicy: configuration.retryPolicy, repollPolicy: configuration.repollPolicy, now: now, observedAt: observedAt)
        self.now = now
        self.logger = logger
        self.metrics = WorkerMetrics(factory: metrics)
    }

    /// Jobs settled since start (any outcome); for tests and the benchmark.
    public var processedCount: Int { locked { $0.outcomes.values.reduce(0, +) } }

    /// Jobs settled since start, by outcome.
    public var outcomes: [JobOutcome: Int] { locked { $0.outcomes } }

    /// Jobs reserved and not yet settled.
    public var inFlightCount: Int { locked { $0.inFlight.count } }

    public func run() async throws {
        let group = DispatchGroup()
        // Threads of their own: the fetcher and the committers block (on Redis, Postgres, their
        // conditions) for the worker's whole life, which libdispatch's shared pool is not for.
        group.enter()
        NamedThread.start("receiptq.fetch") {
            self.runFetcher()
            group.leave()
        }
        for index in 0..<configuration.committers {
            group.enter()
            NamedThread.start("receiptq.commit") {
                self.runCommitter(index)
                group.leave()
            }
        }
        logger.info("Worker started", metadata: ["worker.concurrency": "\(configuration.concurrency)"])
        await withTaskCancellationOrGracefulShutdownHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                finished.withLock { $0 = continuation }
                group.notify(queue: self.timers) { self.finish() }
            }
        } onCancelOrGracefulShutdown: {
            self.stop()
            let deadline = DispatchTime.now() + .milliseconds(Int(self.configuration.shutdownTimeout.seconds * 1000))
            self.timers.asyncAfter(deadline: deadline) { self.abandon() }
        }
        logger.info("Worker stopped")
    }

    /// Stops reserving; the jobs in hand still finish (also what graceful shutdown does).
    public func stop() {
        locked(notify: true) { $0.stopping = true }
    }

    private func finish() {
        finished.withLock { continuation in
            continuation?.resume()
            continuation = nil
        }
    }

    /// The deadline passed with jobs in hand (Apple slow, Postgres down): give them back now
    /// rather than after the heartbeat lapses (Sidekiq's hard shutdown).
    private func abandon() {
        let busy = locked { $0.inFlight.count }
        guard busy > 0 else { return }
        logger.warning("Shutdown deadline passed; requeueing the jobs in hand", metadata: ["worker.in_flight": "\(busy)"])
        requeueAbandoned()
        // Only now release the committers: `run()` must not return before the jobs are back.
        locked(notify: true) { $0.abandoned = true }
        wakeCommitters()
        finish()
    }

    func decide(_ token: Int, _ job: ReservedJob, _ plan: JobPlan) {
        // The call is over: its slot may start another while this job waits for its commit.
        let (started, lastCall) = locked(notify: true) { ($0.calling.removeValue(forKey: token), $0.calling.isEmpty) }
        let answeredAt = DispatchTime.now().uptimeNanoseconds
        decisions.lock()
        decided.append(
            Decided(token: token, job: job, plan: plan, decidedAt: answeredAt, callNanoseconds: started.map { answeredAt &- $0 }))
        // A committer needs waking for the first answer of a batch, a full batch, or the last call
        // answered (a lingering batch commits at once then). Not for every answer: a committer
        // lingering on a batch woke for each one only to wait again, a context switch per job.
        if decided.count == 1 || decided.count >= configuration.commitBatch || lastCall { decisions.signal() }
        decisions.unlock()
    }

    /// Wakes every committer (shutdown states changed).
    func wakeCommitters() {
        decisions.lock()
        decisions.broadcast()
        decisions.unlock()
    }

    // MARK: Helpers

    func locked<T>(notify: Bool = false, _ body: (inout Shared) -> T) -> T {
        condition.lock()
        defer {
            if notify { condition.broadcast() }
            condition.unlock()
        }
        return body(&shared)
    }

    func sleepUnlessStopping(_ seconds: Double) {
        let end = Date().addingTimeInterval(seconds)
        while !locked({ $0.stopping }), Date() < end { usleep(50_000) }
    }
}

extension JobOutcome {
    /// The dashboard's name for this outcome. Spelled out rather than mapped by raw value, so a new
    /// outcome cannot compile without deciding how it is counted.
    var activity: ActivityOutcome {
        switch self {
        case .validated: .validated
        case .invalid: .invalid
        case .retried: .retried
        case .dead: .dead
        case .deferred: .deferred
        }
    }
}
