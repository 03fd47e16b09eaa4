import Foundation
import Logging
import ReceiptCore
import ReceiptTesting
import ServiceLifecycle
import Synchronization
import SystemTesting
import Testing

@testable import ReceiptWorker

@Suite("Worker engine: concurrency, batching, shutdown")
struct WorkerEngineFlowTests {
    let app = AppRecord(id: UUID(), name: "t", bundleID: "b", sharedSecret: nil)

    func jobs(_ count: Int) -> [JobEnvelope] {
        (0..<count).map { _ in
            JobEnvelope(id: JobID.make(), appID: app.id, enqueuedAt: Date(), origin: .api, payload: .receipt(ReceiptJob(receipt: "x")))
        }
    }

    @Test("Never more than `concurrency` calls in flight, nor twice that in hand; the queue drains once Apple answers")
    func boundedConcurrency() async throws {
        let envelopes = jobs(100)
        let queue = MemoryJobQueue(jobs: envelopes)
        let store = MemoryReceiptStore(apps: [app])
        let verifier = HeldVerifier()
        let engine = WorkerEngine(
            configuration: .init(concurrency: 10, reserveTimeout: .milliseconds(20)), makeQueue: { _ in queue },
            makeStore: { _ in store }, verifier: verifier, logger: Logger(label: "test"))
        let most = Mutex((calls: 0, inHand: 0))
        try await runEngine(engine) {
            most.withLock { $0 = (max($0.calls, verifier.open), max($0.inHand, queue.inProcessing)) }
            // Let a full window of calls build up before answering them all.
            if verifier.open == 10 { verifier.releaseAll() }
            return engine.processedCount == 100
        }
        #expect(most.withLock { $0.calls } == 10)
        #expect(most.withLock { $0.inHand } <= 20)
        #expect(queue.acknowledged.count == 100)
        #expect(Set(store.saved.map(\.envelope.id)) == Set(envelopes.map(\.id)))
    }

    /// A store whose first save waits until the test opens the gate.
    final class GatedStore: ReceiptStore, DeliveryLog, RefundDefenceLog, @unchecked Sendable {
        let inner: MemoryReceiptStore
        let gate = DispatchSemaphore(value: 0)
        private let lock = NSLock()
        private var sizes: [Int] = []

        init(_ inner: MemoryReceiptStore) { self.inner = inner }

        var batchSizes: [Int] { lock.withLock { sizes } }

        func app(id: UUID) throws -> AppRecord? { try inner.app(id: id) }
        func historyCursors(_ keys: Set<HistoryKey>) throws -> [HistoryKey: HistoryCursor] {
            try inner.historyCursors(keys)
        }

        func save(_ records: [ValidationRecord]) throws -> [Result<ReceiptResource?, StoreFailure>] {
            let first = lock.withLock {
                sizes.append(records.count)
                return sizes.count == 1
            }
            if first { gate.wait() }
            return try inner.save(records)
        }

        func webhookEndpoint(id: UUID) throws -> WebhookEndpointRecord? { try inner.webhookEndpoint(id: id) }
        func record(_ outcomes: [DeliveryOutcome]) throws { try inner.record(outcomes) }
        func consumptionFacts(appID: UUID, environment: String?, transactionID: String, notificationID: String) throws -> ConsumptionFacts {
            try inner.consumptionFacts(appID: appID, environment: environment, transactionID: transactionID, notificationID: notificationID)
        }
        func claimConsumption(appID: UUID, notificationID: String, transactionID: String, job: UUID) throws -> Bool {
            try inner.claimConsumption(appID: appID, notificationID: notificationID, transactionID: transactionID, job: job)
        }
        func record(_ answers: [ConsumptionAnswer]) throws { try inner.record(answers) }
    }

    @Test("Results that arrive while a commit runs are stored together in the next transaction")
    func groupCommit() async throws {
        let queue = MemoryJobQueue(jobs: jobs(40))
        let store = GatedStore(MemoryReceiptStore(apps: [app]))
        let verifier = HeldVerifier()
        let engine = WorkerEngine(
            configuration: .init(concurrency: 40, committers: 1, reserveTimeout: .milliseconds(20)), makeQueue: { _ in queue },
            makeStore: { _ in store }, verifier: verifier, logger: Logger(label: "test"))
        let step = Mutex((released: false, opened: false))
        try await runEngine(engine) {
            step.withLock { step in
                if !step.released, verifier.open == 40 {
                    verifier.releaseAll()
                    step.released = true
                }
                // The committer holds the first results in its gated transaction; the gate opens
                // once every other result is decided and waits behind it.
                let sizes = store.batchSizes
                if step.released, !step.opened, sizes.count == 1,
                    engine.decisions.withLock({ engine.decided.count }) == 40 - sizes[0]
                {
                    store.gate.signal()
                    step.opened = true
                }
            }
            return engine.processedCount == 40
        }
        let sizes = store.batchSizes
        #expect(sizes.reduce(0, +) == 40)
        #expect(sizes.count < 40)
        // Whether the first transaction caught one result or many, the gate guarantees a shared one.
        #expect((sizes.max() ?? 0) > 1)
    }

    @Test("An answered job frees its call slot before its commit; a stalled commit stops the fetcher at twice `concurrency`")
    func slotFreedAtAnswer() async throws {
        let envelopes = jobs(60)
        let queue = MemoryJobQueue(jobs: envelopes)
        let store = GatedStore(MemoryReceiptStore(apps: [app]))
        let verifier = HeldVerifier()
        let engine = WorkerEngine(
            // A heartbeat on every pass of the fetcher's loop: the test counts its passes.
            configuration: .init(concurrency: 10, committers: 1, reserveTimeout: .milliseconds(20), heartbeatInterval: .zero),
            makeQueue: { _ in queue }, makeStore: { _ in store }, verifier: verifier, logger: Logger(label: "test"))
        let seen = Mutex((calls: 0, inHand: 0, stalledAt: 0, beatsAtTwenty: Int?.none))
        try await runEngine(engine) {
            let (open, inHand) = (verifier.open, queue.inProcessing)
            let release = seen.withLock { seen in
                seen.calls = max(seen.calls, open)
                seen.inHand = max(seen.inHand, inHand)
                // The first commit hangs (Postgres stalled): answers keep freeing call slots until
                // twice `concurrency` jobs are in hand; then the fetcher must reserve nothing more.
                // Two heartbeats after 20 were first in hand, the fetcher has gone round its loop
                // at least once with 10 free slots and no room: what it holds then is the answer.
                if seen.stalledAt == 0, inHand == 20, seen.beatsAtTwenty == nil { seen.beatsAtTwenty = queue.heartbeats }
                guard seen.stalledAt == 0, let beats = seen.beatsAtTwenty, queue.heartbeats >= beats + 2 else { return false }
                seen.stalledAt = queue.inProcessing
                return true
            }
            if open == 10 || release { verifier.releaseAll() }
            if release { store.gate.signal() }
            return engine.processedCount == 60
        }
        let result = seen.withLock { $0 }
        #expect(result.calls == 10)
        #expect(result.inHand == 20)
        // Nothing more was reserved while the commit stalled with 20 in hand.
        #expect(result.stalledAt == 20)
        #expect(queue.acknowledged.count == 60)
        #expect(Set(store.inner.saved.map(\.envelope.id)) == Set(envelopes.map(\.id)))
    }

    @Test("Answers that come within the commit linger of the first one share its transaction")
    func lingeringCommit() async throws {
        let queue = MemoryJobQueue(jobs: jobs(5))
        let store = GatedStore(MemoryReceiptStore(apps: [app]))
        store.gate.signal()
        let verifier = HeldVerifier()
        let engine = WorkerEngine(
            // A long linger, so that a poll held up on a loaded machine still falls within it: the
            // last answer commits the batch at once (no call left in flight), not after 10 s.
            configuration: .init(concurrency: 5, committers: 2, commitLinger: .seconds(10), reserveTimeout: .milliseconds(20)),
            makeQueue: { _ in queue }, makeStore: { _ in store }, verifier: verifier, logger: Logger(label: "test"))
        let released = Mutex(0)
        try await runEngine(engine) {
            // Five answers, one per poll, each once the previous one is decided (its call slot
            // freed): without the linger each would wake a committer alone.
            released.withLock { released in
                if released < 5, verifier.open == 5 - released, engine.locked({ $0.calling.count }) == 5 - released {
                    _ = verifier.releaseOne()
                    released += 1
                }
            }
            return engine.processedCount == 5
        }
        #expect(store.batchSizes == [5])
        #expect(queue.acknowledged.count == 5)
    }

    @Test("With no other call in flight, an answer commits at once instead of lingering")
    func loneAnswerDoesNotLinger() async throws {
        let queue = MemoryJobQueue(jobs: jobs(1))
        let store = MemoryReceiptStore(apps: [app])
        let verifier = HeldVerifier()
        // An hour's linger: only the rule, not the clock, can commit this job before shutdown
        // (which commits whatever is in hand, so `processedCount` alone would not tell).
        let engine = WorkerEngine(
            configuration: .init(concurrency: 5, committers: 1, commitLinger: .seconds(3600), reserveTimeout: .milliseconds(20)),
            makeQueue: { _ in queue }, makeStore: { _ in store }, verifier: verifier, logger: Logger(label: "test"))
        let committedWhileRunning = Mutex(false)
        try await runEngine(engine) {
            if verifier.open == 1 { verifier.releaseOne() }
            guard engine.processedCount == 1 else { return false }
            committedWhileRunning.withLock { $0 = true }
            return true
        }
        #expect(committedWhileRunning.withLock { $0 })
        #expect(store.saved.count == 1)
        #expect(queue.acknowledged.count == 1)
    }

    // The limit is the upper bound: Apple (the held verifier) never answers before the engine
    // returns, so an engine that did not give up at its deadline would hang here. A wall-clock
    // bound on the return instead measured the test process's cooperative pool, which the whole
    // suite starting at once holds for seconds on this 2-core machine.
    @Test("Past the shutdown deadline, the engine hands its jobs back and returns", .timeLimit(.minutes(1)))
    func abandonsAtTheDeadline() async throws {
        let queue = MemoryJobQueue(jobs: jobs(2))
        let store = MemoryReceiptStore(apps: [app])
        let abandoned = Mutex(0)
        let verifier = HeldVerifier()
        let engine = WorkerEngine(
            configuration: .init(concurrency: 2, reserveTimeout: .milliseconds(20), shutdownTimeout: .milliseconds(300)),
            makeQueue: { _ in queue }, makeStore: { _ in store }, verifier: verifier,
            requeueAbandoned: { abandoned.withLock { $0 += 1 } }, logger: Logger(label: "test"))
        let started = Mutex<ContinuousClock.Instant?>(nil)
        try await runEngine(engine) {
            guard verifier.open == 2 else { return false }
            started.withLock { $0 = .now }
            return true
        }
        // Not before the deadline (0.3 s): the jobs in hand had their time.
        #expect(ContinuousClock.now - (started.withLock { $0 } ?? .now) >= .milliseconds(300))
        #expect(abandoned.withLock { $0 } == 1)
        #expect(store.saved.isEmpty)
        #expect(queue.inProcessing == 2)
        verifier.releaseAll()
    }

    /// Runs `jobs` through an engine at `concurrency` whose calls Apple holds; once `full()` says
    /// the window is up it triggers graceful shutdown, waits for `beforeAnswers()`, answers every
    /// call and waits for the engine to return. Returns the queue, the store and how many times the
    /// engine gave up at its deadline.
    func shutDown(
        jobs count: Int, concurrency: Int, full: @escaping @Sendable (HeldVerifier, MemoryJobQueue) -> Bool,
        beforeAnswers: @escaping @Sendable (MemoryJobQueue, WorkerEngine) async throws -> Void
    ) async throws -> (queue: MemoryJobQueue, store: MemoryReceiptStore, abandoned: Int) {
        let queue = MemoryJobQueue(jobs: jobs(count))
        let store = MemoryReceiptStore(apps: [app])
        let abandoned = Mutex(0)
        let verifier = HeldVerifier()
        let engine = WorkerEngine(
            configuration: .init(concurrency: concurrency, reserveTimeout: .milliseconds(20), shutdownTimeout: .seconds(10)),
            makeQueue: { _ in queue }, makeStore: { _ in store }, verifier: verifier,
            requeueAbandoned: { abandoned.withLock { $0 += 1 } }, logger: Logger(label: "test"))
        let group = ServiceGroup(services: [engine], gracefulShutdownSignals: [], logger: Logger(label: "test"))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            let isFull = try await eventually(timeout: .seconds(20), interval: .milliseconds(5)) { full(verifier, queue) }
            #expect(isFull, "the window filled up")
            await group.triggerGracefulShutdown()
            try await beforeAnswers(queue, engine)
            verifier.releaseAll()
            try await tasks.waitForAll()
        }
        return (queue, store, abandoned.withLock { $0 })
    }

    @Test("Jobs in hand at shutdown finish within the deadline and nothing is requeued")
    func drainsOnShutdown() async throws {
        let (queue, _, abandoned) = try await shutDown(
            jobs: 5, concurrency: 5, full: { verifier, _ in verifier.open == 5 },
            beforeAnswers: { _, engine in
                // Apple answers after the shutdown began (the engine is stopping): the answers are
                // still stored and acknowledged.
                let stopping = try await eventually(timeout: .seconds(20), interval: .milliseconds(5)) { engine.locked { $0.stopping } }
                #expect(stopping, "the engine saw the shutdown")
            })
        #expect(abandoned == 0)
        #expect(queue.acknowledged.count == 5)
        #expect(queue.inProcessing == 0)
    }

    @Test("Jobs reserved ahead of the free slots are given back unstarted at shutdown; the started ones finish", .timeLimit(.minutes(1)))
    func givesBackJobsReservedAhead() async throws {
        // Eight calls, and a quarter of the concurrency (2) reserved ahead.
        let (queue, store, abandoned) = try await shutDown(
            jobs: 20, concurrency: 8, full: { verifier, queue in verifier.open == 8 && queue.inProcessing >= 10 },
            beforeAnswers: { queue, _ in
                #expect(queue.inProcessing == 10)
                // The fetcher gives the two back when it sees the shutdown; only then do the calls
                // end (an answer before it would free a slot for another job).
                let givenBack = try await eventually(timeout: .seconds(20), interval: .milliseconds(5)) { queue.waiting >= 12 }
                #expect(givenBack)
            })
        #expect(abandoned == 0)
        #expect(queue.acknowledged.count == 8)
        #expect(queue.inProcessing == 0)
        #expect(queue.waiting == 12)
        #expect(store.saved.count == 8)
    }

    /// A queue whose first reserve moves a job and then loses the reply, as a dropped connection does.
    final class LossyQueue: JobQueue, @unchecked Sendable {
        let inner: MemoryJobQueue
        private var failed = false

        init(_ inner: MemoryJobQueue) { self.inner = inner }

        func reserve(max: Int, timeout: Duration) throws -> [ReservedJob] {
            let jobs = try inner.reserve(max: 1, timeout: timeout)
            if !failed, !jobs.isEmpty {
                failed = true
                struct Lost: Error {}
                throw Lost()
            }
            return jobs
        }

        func settle(_ settlements: [Settlement], activity: ActivityTally) throws { try inner.settle(settlements, activity: activity) }
        func reconcile(keeping inFlight: [[UInt8]], settledAgain: (ReservedJob) -> Settlement?) throws -> Reconciliation {
            try inner.reconcile(keeping: inFlight, settledAgain: settledAgain)
        }
        func heartbeat(busy: Int) throws {}
    }

    /// A queue whose settle of the first job is "lost in a failover": the settle ran (the worker
    /// let the job go) but the job is back in the processing list, as on a promoted replica that
    /// never heard of it; the next settle then fails once, as the connection to the lost primary does.
    final class FailoverQueue: JobQueue, @unchecked Sendable {
        let inner: MemoryJobQueue
        let lock = NSLock()
        private var lostOne = false
        private var failedOnce = false
        /// The jobs whose settle was lost (a batch: one or more).
        private(set) var lost: [UUID] = []

        init(_ inner: MemoryJobQueue) { self.inner = inner }

        func reserve(max: Int, timeout: Duration) throws -> [ReservedJob] { try inner.reserve(max: 1, timeout: timeout) }

        func settle(_ settlements: [Settlement], activity: ActivityTally) throws {
            let (lose, fail) = lock.withLock { () -> (Bool, Bool) in
                if !lostOne {
                    lostOne = true
                    return (true, false)
                }
                if !failedOnce {
                    failedOnce = true
                    return (false, true)
                }
                return (false, false)
            }
            struct ConnectionLost: Error {}
            if fail { throw ConnectionLost() }
            try inner.settle(settlements, activity: activity)
            guard lose else { return }
            for settlement in settlements { inner.restoreToProcessing(settlement.job) }
            lock.withLock { lost = settlements.compactMap(\.job.envelope?.id) }
        }

        func reconcile(keeping inFlight: [[UInt8]], settledAgain: (ReservedJob) -> Settlement?) throws -> Reconciliation {
            try inner.reconcile(keeping: inFlight, settledAgain: settledAgain)
        }

        func heartbeat(busy: Int) throws {}
    }

    @Test(
        "A settle a failover lost: after the next settle fails, the job back in processing is acknowledged again from memory, not validated twice"
    )
    func settleLostInFailover() async throws {
        let envelopes = jobs(3)
        let memory = MemoryJobQueue(jobs: envelopes)
        let queue = FailoverQueue(memory)
        let store = MemoryReceiptStore(apps: [app])
        // A heartbeat an hour away: only the failed settle asks for the reconcile.
        let engine = WorkerEngine(
            configuration: .init(concurrency: 1, reserveTimeout: .milliseconds(20), heartbeatInterval: .seconds(3600)),
            makeQueue: { _ in queue }, makeStore: { _ in store },
            verifier: StubVerifier([StubVerifier.report(status: 0, verdict: .valid)]), logger: Logger(label: "test"))
        try await runEngine(engine) { engine.processedCount == 3 && memory.inProcessing == 0 }
        #expect(memory.inProcessing == 0, "nothing left in processing")
        #expect(store.saved.count == 3, "each job validated and stored once")
        let acknowledged = memory.acknowledged.compactMap(\.job.envelope?.id)
        let lost = queue.lock.withLock { queue.lost }
        #expect(!lost.isEmpty)
        #expect(
            acknowledged.count == 3 + lost.count && Set(acknowledged) == Set(envelopes.map(\.id)), "the lost ones acknowledged twice: \(acknowledged)"
        )
    }

    @Test("A job moved by a reserve whose reply was lost is given back and validated, not stranded")
    func straysAfterLostReply() async throws {
        let envelopes = jobs(3)
        let memory = MemoryJobQueue(jobs: envelopes)
        let queue = LossyQueue(memory)
        let store = MemoryReceiptStore(apps: [app])
        let engine = WorkerEngine(
            configuration: .init(concurrency: 4, reserveTimeout: .milliseconds(20)), makeQueue: { _ in queue },
            makeStore: { _ in store }, verifier: StubVerifier([StubVerifier.report(status: 0, verdict: .valid)]),
            logger: Logger(label: "test"))
        try await runEngine(engine) { engine.processedCount == 3 }
        #expect(Set(store.saved.map(\.envelope.id)) == Set(envelopes.map(\.id)))
        #expect(memory.inProcessing == 0)
    }
}
