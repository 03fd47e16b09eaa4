import Dispatch
import Foundation
import Logging
import Metrics
import ReceiptCore
import ServiceLifecycle
import Synchronization

/// The worker: `concurrency` validations in flight in one process on a handful of threads.
///
/// ```swift
/// let engine = WorkerEngine(configuration: .init(concurrency: 1000), makeQueue: { try queue($0) },
///                           makeStore: { try store($0) }, verifier: appStore, logger: logger)
/// try await ServiceGroup(services: [engine], logger: logger).run()
/// ```
///
/// **Pipeline.** One *fetcher* thread reserves jobs in batches (as many as there are free slots)
/// into the process's processing list, asks the local ``CircuitGate`` and starts each call to
/// Apple on the asynchronous verifier (libcurl's multi interface: one thread for every call).
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
        /// How long one reserve blocks on an empty queue (on the validations list only: Redis cannot
        /// block on several); short, so shutdown is noticed quickly and an idle worker looks at
        /// the other queues (notifications, webhook deliveries, re-polls) twice a second.
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

        /// Creates a configuration; every value has a production default.
        public init(
            concurrency: Int = 16, fetchBatch: Int = 128, commitBatch: Int = 128, committers: Int = 2,
            reserveTimeout: Duration = .milliseconds(500), shutdownTimeout: Duration = .seconds(25), heartbeatInterval: Duration = .seconds(5),
            circuitRefresh: Duration = .milliseconds(250), circuitFlush: Duration = .milliseconds(50),
            retryPolicy: RetryPolicy = RetryPolicy(), repollPolicy: RepollPolicy = RepollPolicy(), verifyReceiptGoneAfter: Int = 20
        ) {
            self.verifyReceiptGoneAfter = max(1, verifyReceiptGoneAfter)
            self.concurrency = max(1, concurrency)
            self.fetchBatch = max(1, fetchBatch)
            self.commitBatch = max(1, commitBatch)
            self.committers = max(1, committers)
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
    }

    /// Everything the threads share, under one lock.
    struct Shared {
        var nextToken = 0
        var inFlight: [Int: ReservedJob] = [:]
        /// When each job in flight was started (monotonic nanoseconds), for the stage metrics.
        var startedAt: [Int: UInt64] = [:]
        /// Jobs started and not yet answered (the slots `concurrency` bounds).
        var calling = 0
        var stopping = false
        var fetcherDone = false
        var abandoned = false
        var outcomes: [JobOutcome: Int] = [:]
    }

    let configuration: Configuration
    let makeQueue: @Sendable (String) throws -> any JobQueue
    let makeStore: @Sendable (String) throws -> any ReceiptStore
    private let makeCircuit: @Sendable () throws -> (any OutageCircuit)?
    private let makeWatch: @Sendable () throws -> (any VerifyReceiptWatch)?
    private let verifier: any ReceiptVerifier
    private let webhooks: (any WebhookSender)?
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
    ///   - verifier: the asynchronous verifier (Apple, or a mock), shared by every job.
    ///   - webhooks: sends webhook deliveries (nil: a `webhook` job goes to the dead letters).
    ///   - requeueAbandoned: gives the processing list back to the queue when graceful shutdown's
    ///     deadline passes with jobs still in hand.
    ///   - now: the injected clock.
    ///   - metrics: where jobs settled, Apple's calls and latencies are counted (default: the
    ///     process's bootstrapped swift-metrics backend).
    ///   - logger: where the engine logs.
    public init(
        configuration: Configuration, makeQueue: @escaping @Sendable (String) throws -> any JobQueue,
        makeStore: @escaping @Sendable (String) throws -> any ReceiptStore,
        makeCircuit: @escaping @Sendable () throws -> (any OutageCircuit)? = { nil },
        makeWatch: @escaping @Sendable () throws -> (any VerifyReceiptWatch)? = { nil }, verifier: any ReceiptVerifier,
        webhooks: (any WebhookSender)? = nil,
        requeueAbandoned: @escaping @Sendable () -> Void = {}, now: @escaping @Sendable () -> Date = { Date() },
        metrics: any MetricsFactory = MetricsSystem.factory, logger: Logger
    ) {
        self.configuration = configuration
        self.makeQueue = makeQueue
        self.makeStore = makeStore
        self.makeCircuit = makeCircuit
        self.makeWatch = makeWatch
        self.verifier = verifier
        self.webhooks = webhooks
        self.requeueAbandoned = requeueAbandoned
        self.planner = JobPlanner(retryPolicy: configuration.retryPolicy, repollPolicy: configuration.repollPolicy, now: now)
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
        group.enter()
        DispatchQueue(label: "receiptq.worker.fetcher").async {
            self.runFetcher()
            group.leave()
        }
        for index in 0..<configuration.committers {
            group.enter()
            DispatchQueue(label: "receiptq.worker.committer.\(index)").async {
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

    // MARK: Fetcher

    private func runFetcher() {
        var queue: (any JobQueue)?
        var store: (any ReceiptStore)?
        var gate: CircuitGate?
        var lifecycle: VerifyReceiptGate?
        var lastHeartbeat = Date.distantPast
        // Pacing uses the machine's clock: an injected clock that stands still would stop the flushes.
        var lastFlush: ContinuousClock.Instant?
        var mayHoldStrays = true
        var pause = 0.1
        var rng = SystemRandomNumberGenerator()
        while !locked({ $0.stopping }) {
            do {
                if gate == nil { gate = CircuitGate(circuit: try makeCircuit(), refreshInterval: configuration.circuitRefresh) }
                if lifecycle == nil { lifecycle = VerifyReceiptGate(watch: try makeWatch(), goneAfter: configuration.verifyReceiptGoneAfter) }
                if queue == nil { queue = try makeQueue("fetcher") }
                guard let queue, let gate, let lifecycle else { continue }
                if store == nil { store = try? makeStore("fetcher") }
                if lastFlush.map({ ContinuousClock.now - $0 >= configuration.circuitFlush }) ?? true {
                    flush(gate)
                    flush(lifecycle)
                    lastFlush = .now
                }
                if now().timeIntervalSince(lastHeartbeat) >= configuration.heartbeatInterval.seconds {
                    try queue.heartbeat(busy: inFlightCount)
                    lastHeartbeat = now()
                }
                let free = waitForFreeSlots()
                guard free > 0 else { continue }
                if mayHoldStrays {
                    let moved = try queue.requeueStrays(keeping: locked { Array($0.inFlight.values.map(\.raw)) })
                    if moved > 0 { logger.info("Gave back jobs a lost reply left in processing", metadata: ["jobs.count": "\(moved)"]) }
                    mayHoldStrays = false
                }
                let jobs = try queue.reserve(max: min(free, configuration.fetchBatch), timeout: configuration.reserveTimeout)
                for job in jobs { start(job, store: store, gate: gate, lifecycle: lifecycle, using: &rng) }
                pause = 0.1
            } catch {
                // Redis unreachable: back off (bounded) and try again; the façade reconnects on the
                // next call. A reserve that failed may still have moved a job: look for strays first.
                mayHoldStrays = true
                logger.warning("Worker fetch error", error: error)
                sleepUnlessStopping(pause)
                pause = min(pause * 2, 5)
            }
        }
        if let gate { flush(gate) }
        locked(notify: true) { $0.fetcherDone = true }
        wakeCommitters()
    }

    private func flush(_ gate: CircuitGate) {
        do {
            for transition in try gate.flush(now: now()) {
                logger.warning("Apple outage circuit changed", metadata: ["circuit.transition": "\(transition)"])
            }
        } catch {
            logger.debug("Outage circuit unreachable", error: error)
        }
    }

    private func flush(_ lifecycle: VerifyReceiptGate) {
        do {
            let before = lifecycle.lifecycle
            guard try lifecycle.flush(now: now()) else { return }
            let after = lifecycle.lifecycle
            metrics.verifyReceipt(after)
            if before.goneSince == nil, after.goneSince != nil {
                logger.critical(
                    "verifyReceipt is gone (HTTP 404/410 on a run of calls): apps on `auto` with an In-App Purchase key move to the App Store Server API; the others keep retrying until they get a key"
                )
            } else if before.sunset != after.sunset || before.deprecation != after.deprecation {
                logger.warning(
                    "verifyReceipt announces its end",
                    metadata: [
                        "verify_receipt.deprecation": "\(after.deprecation.map { "\($0)" } ?? "-")",
                        "verify_receipt.sunset": "\(after.sunset.map { "\($0)" } ?? "-")",
                    ])
            }
        } catch {
            logger.debug("verifyReceipt lifecycle unreachable", error: error)
        }
    }

    /// Waits (briefly) until a slot is free; returns how many are.
    private func waitForFreeSlots() -> Int {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date().addingTimeInterval(0.1)
        while free(shared) == 0, !shared.stopping {
            if !condition.wait(until: deadline) { break }
        }
        return shared.stopping ? 0 : free(shared)
    }

    /// Slots free to start a call: fewer than `concurrency` calling, and fewer than twice that in
    /// hand (calling, or answered and waiting for a commit).
    private func free(_ shared: Shared) -> Int {
        max(0, min(configuration.concurrency - shared.calling, 2 * configuration.concurrency - shared.inFlight.count))
    }

    private func start(
        _ job: ReservedJob, store: (any ReceiptStore)?, gate: CircuitGate, lifecycle: VerifyReceiptGate,
        using generator: inout SystemRandomNumberGenerator
    ) {
        let token = locked { shared -> Int in
            shared.nextToken += 1
            shared.inFlight[shared.nextToken] = job
            shared.startedAt[shared.nextToken] = DispatchTime.now().uptimeNanoseconds
            shared.calling += 1
            return shared.nextToken
        }
        guard let envelope = job.envelope else {
            logger.warning("Undecodable job buried")
            return decide(token, job, .bury(nil))
        }
        // A receipt the ingestion node found forged is recorded, never sent to Apple: no circuit,
        // no secret, no app lookup beyond the one the store's foreign key makes.
        if envelope.fraudReason != nil { return decide(token, job, planner.fraud(envelope)) }
        // A notification is Apple's own statement, checked at the door: nothing to ask Apple, so
        // neither the circuit nor the app's backend applies.
        if envelope.kind == .notification { return decide(token, job, planner.notification(envelope, using: &generator)) }
        // A webhook delivery calls the customer's backend, not Apple: Apple's circuit does not apply.
        if envelope.kind == .webhook { return startDelivery(token, job, envelope, store: store, using: &generator) }
        let permission = gate.permission(now: now())
        if case .deny(let until) = permission {
            return decide(token, job, planner.deferred(envelope, until: until, using: &generator))
        }
        let app: AppRecord?
        do {
            guard let store else { throw StoreFailure(code: "store_unavailable", message: "no connection") }
            app = try store.app(id: envelope.appID)
        } catch {
            return decide(token, job, planner.storeUnavailable(envelope, calls: [], using: &generator))
        }
        guard let app else { return decide(token, job, planner.unknownApp(envelope)) }
        let isProbe = permission == .probe
        let request: VerificationRequest
        switch planner.start(envelope, app: app, verifyReceipt: lifecycle.lifecycle) {
        case .call(let call): request = call
        case .settle(let plan):
            if case .bury(let failed?) = plan, let code = failed.errorCode, ConfigurationAlarm.raiseOnce(appID: app.id) {
                logger.error(
                    "The app cannot use the App Store Server API: \(failed.errorMessage ?? code)",
                    metadata: ["app.id": "\(app.id.uuidString.lowercased())", "error.code": "\(code)"])
            }
            return decide(token, job, plan)
        }
        let sandboxPolicy = app.sandboxPolicy
        if request.switchesApp, SwitchAlarm.raiseOnce(appID: app.id) {
            metrics.backendSwitched()
            logger.critical(
                "verifyReceipt is retired: this app now validates with the App Store Server API",
                metadata: ["app.id": "\(app.id.uuidString.lowercased())", "app.bundle_id": "\(app.bundleID)"])
        }
        let canMove = app.backend == .auto && app.serverAPIKey != nil
        verifier.verify(request) { report in
            // On the HTTP engine's thread: count, decide, hand over; nothing here blocks.
            // One circuit for both APIs: an outage of either defers the jobs, a 429 is not an outage.
            gate.record(outage: report.verdict == .outage, probe: isProbe)
            self.metrics.record(report.calls)
            var rng = SystemRandomNumberGenerator()
            lifecycle.record(report)
            var plan: JobPlan
            if report.notice?.gone == true, canMove {
                // verifyReceipt answers "gone" and this app can move: wait (without an attempt) for
                // the deployment to agree, then it goes to the Server API.
                plan = self.planner.deferred(envelope, until: self.now().addingTimeInterval(2), using: &rng)
            } else {
                plan = self.planner.plan(envelope, report: report, sandboxPolicy: sandboxPolicy, using: &rng)
            }
            if request.switchesApp, case .store(var record) = plan {
                record.switchesApp = true
                plan = .store(record)
            }
            if case .bury(let failed?) = plan, failed.errorCode == "shared_secret_mismatch", ConfigurationAlarm.raiseOnce(appID: app.id) {
                // Every receipt of this app will fail the same way until someone fixes the secret:
                // say it once, loudly, not once per job.
                self.logger.error(
                    "Apple rejects this app's shared secret (21004): update it, then retry the dead letters",
                    metadata: ["app.id": "\(app.id.uuidString.lowercased())", "app.bundle_id": "\(app.bundleID)"])
            }
            self.decide(token, job, plan)
        }
    }

    private func startDelivery(
        _ token: Int, _ job: ReservedJob, _ envelope: JobEnvelope, store: (any ReceiptStore)?, using generator: inout SystemRandomNumberGenerator
    ) {
        let endpoint: WebhookEndpointRecord?
        do {
            guard let store, let target = envelope.webhook else { throw StoreFailure(code: "store_unavailable", message: "no connection") }
            endpoint = try store.webhookEndpoint(id: target.endpointID)
        } catch {
            return decide(token, job, planner.storeUnavailable(envelope, calls: [], using: &generator))
        }
        switch planner.webhookStart(envelope, endpoint: endpoint) {
        case .settle(let plan): return decide(token, job, plan)
        case .send(let request):
            guard let webhooks else {
                return decide(
                    token, job,
                    .bury(envelope.failed(code: "webhooks_not_configured", message: "this worker cannot send webhooks", calls: [], at: now())))
            }
            webhooks.deliver(request) { report in
                var rng = SystemRandomNumberGenerator()
                self.metrics.delivered(report)
                self.decide(token, job, self.planner.webhook(envelope, report: report, using: &rng))
            }
        }
    }

    private func decide(_ token: Int, _ job: ReservedJob, _ plan: JobPlan) {
        // The call is over: its slot may start another while this job waits for its commit.
        locked(notify: true) { $0.calling -= 1 }
        decisions.lock()
        decided.append(Decided(token: token, job: job, plan: plan, decidedAt: DispatchTime.now().uptimeNanoseconds))
        decisions.signal()
        decisions.unlock()
    }

    /// Wakes every committer (shutdown states changed).
    private func wakeCommitters() {
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

    private func sleepUnlessStopping(_ seconds: Double) {
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
