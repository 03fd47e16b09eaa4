import Foundation
import Logging
import ReceiptCore
import ReceiptTesting
import ReceiptWorker
import ServiceLifecycle
import Synchronization
import Testing

/// Runs `engine` in a service group until `done` holds (or 4,000 polls, 20 s on an idle machine,
/// pass), then shuts it down gracefully.
///
/// The bound counts polls, not wall time: the parallel test run can starve the cooperative pool for
/// tens of seconds on two cores, and a wall-clock deadline would then expire before the engine
/// (started on that pool) ever ran.
func runEngine(_ engine: WorkerEngine, until done: @escaping @Sendable () -> Bool) async throws {
    let group = ServiceGroup(services: [engine], gracefulShutdownSignals: [], logger: Logger(label: "test"))
    try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        var polls = 0
        while !done(), polls < 4_000 {
            try await Task.sleep(for: .milliseconds(5))
            polls += 1
        }
        await group.triggerGracefulShutdown()
        try await tasks.waitForAll()
    }
}

/// A verifier that keeps every call open until the test releases it: Apple taking its time.
final class HeldVerifier: ReceiptVerifier, @unchecked Sendable {
    private let lock = NSLock()
    private var held: [@Sendable (VerificationReport) -> Void] = []
    private let report: VerificationReport

    init(_ report: VerificationReport = StubVerifier.report(status: 0, verdict: .valid)) { self.report = report }

    var open: Int { lock.withLock { held.count } }

    func verify(_ request: VerificationRequest, completion: @escaping @Sendable (VerificationReport) -> Void) {
        lock.withLock { held.append(completion) }
    }

    /// Answers the oldest open call; false when none is open.
    @discardableResult
    func releaseOne() -> Bool {
        let call = lock.withLock { held.isEmpty ? nil : held.removeFirst() }
        call?(report)
        return call != nil
    }

    func releaseAll() {
        let calls = lock.withLock {
            defer { held.removeAll() }
            return held
        }
        for call in calls { call(report) }
    }
}

@Suite("Worker engine: Apple's verdicts become the right transitions")
struct WorkerEngineVerdictTests {
    let app = AppRecord(id: UUID(), name: "t", bundleID: "com.example", sharedSecret: "s3cret")
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func envelope(firstFailedAt: Date? = nil) -> JobEnvelope {
        var envelope = JobEnvelope(
            id: JobID.make(), kind: .validate, appID: app.id, enqueuedAt: now, origin: .api, receipt: "MIIx", style: .unified,
            bundleID: "com.example")
        envelope.firstFailedAt = firstFailedAt
        return envelope
    }

    func engine(
        queue: MemoryJobQueue, store: MemoryReceiptStore, verifier: any ReceiptVerifier, circuit: MemoryOutageCircuit? = nil
    ) -> WorkerEngine {
        WorkerEngine(
            configuration: .init(concurrency: 8, reserveTimeout: .milliseconds(20), circuitRefresh: .zero),
            makeQueue: { _ in queue }, makeStore: { _ in store }, makeCircuit: { circuit?.sharingLane() }, verifier: verifier,
            now: { [now] in now }, logger: Logger(label: "test"))
    }

    /// Runs one job through a fresh engine.
    func run(
        _ envelope: JobEnvelope, verifier: StubVerifier, store: MemoryReceiptStore? = nil
    ) async throws -> (
        [JobOutcome: Int], MemoryJobQueue, MemoryReceiptStore
    ) {
        let queue = MemoryJobQueue(jobs: [envelope])
        let store = store ?? MemoryReceiptStore(apps: [app])
        let engine = engine(queue: queue, store: store, verifier: verifier)
        try await runEngine(engine) { engine.processedCount == 1 }
        return (engine.outcomes, queue, store)
    }

    @Test("Valid: stored with its purchases, then acknowledged with the resource for the waiting API")
    func valid() async throws {
        let transaction: JSONValue = .object([
            "transaction_id": .string("1000"), "original_transaction_id": .string("1000"), "product_id": .string("p1"),
            "quantity": .string("1"), "purchase_date_ms": .string("1700000000000"),
        ])
        let verifier = StubVerifier([StubVerifier.report(status: 0, verdict: .valid, transactions: [transaction])])
        let (outcomes, queue, store) = try await run(envelope(), verifier: verifier)
        #expect(outcomes == [.validated: 1])
        #expect(store.saved.count == 1)
        #expect(store.saved.first?.status == .valid)
        #expect(store.saved.first?.purchases.map(\.transactionID) == ["1000"])
        #expect(store.saved.first?.environment == "sandbox")
        #expect(queue.acknowledged.count == 1)
        let resource = try ReceiptResource.decode(try #require(queue.acknowledged.first?.result))
        #expect(resource.validationStatus == .valid)
        #expect(queue.inProcessing == 0)
        #expect(verifier.requests.first?.sharedSecret == "s3cret")
    }

    @Test("Invalid (21003): stored as invalid and acknowledged, never retried")
    func invalid() async throws {
        let (outcomes, queue, store) = try await run(
            envelope(), verifier: StubVerifier([StubVerifier.report(status: 21003, verdict: .invalid)]))
        #expect(outcomes == [.invalid: 1])
        #expect(store.saved.first?.status == .invalid)
        #expect(queue.retries.isEmpty && queue.dead.isEmpty)
    }

    @Test("A receipt the API found forged is stored as fraud, without calling Apple")
    func fraud() async throws {
        var forged = envelope()
        forged.fraudReason = "untrusted_chain"
        let verifier = StubVerifier([StubVerifier.report(status: 0, verdict: .valid)])
        let (outcomes, queue, store) = try await run(forged, verifier: verifier)
        #expect(outcomes == [.invalid: 1])
        let saved = try #require(store.saved.first)
        #expect(saved.status == .fraud)
        #expect(saved.purchases.isEmpty && saved.calls.isEmpty)
        #expect(verifier.requests.isEmpty)
        #expect(queue.retries.isEmpty && queue.dead.isEmpty && queue.inProcessing == 0)
    }

    @Test("Transient (21005): retried in seconds with the attempt counted and the call recorded")
    func transient() async throws {
        let (outcomes, queue, store) = try await run(
            envelope(), verifier: StubVerifier([StubVerifier.report(status: 21005, verdict: .transient)]))
        #expect(outcomes == [.retried: 1])
        #expect(store.saved.isEmpty)
        let retry = try #require(queue.retries.first)
        #expect(retry.envelope.attempt == 1)
        #expect(retry.envelope.errorCode == "apple_21005")
        #expect(retry.envelope.history.count == 1)
        let delay = retry.runAt.timeIntervalSince(now)
        #expect(delay >= 0.2 && delay <= 2)
        #expect(queue.inProcessing == 0)
    }

    @Test("Shared secret mismatch (21004): parked in the dead letters, receipt marked failed")
    func sharedSecretMismatch() async throws {
        let (outcomes, queue, store) = try await run(
            envelope(), verifier: StubVerifier([StubVerifier.report(status: 21004, verdict: .configurationError)]))
        #expect(outcomes == [.dead: 1])
        #expect(queue.dead.first??.errorCode == "shared_secret_mismatch")
        #expect(store.saved.first?.status == .failed)
        #expect(queue.totalActivity == ActivityTally(outcomes: [.dead: 1], failures: [.configuration: 1]))
    }

    @Test("The settle carries the batch's activity: outcomes, and the failure class of each retry")
    func activity() async throws {
        let transportError = VerificationReport(
            verdict: .outage, response: nil,
            calls: [
                AppleCall(
                    endpoint: .production, httpStatus: nil, appleStatus: nil, isRetryable: nil, latencyMs: 15_000, errorCode: "transport_timeout")
            ], errorCode: "transport_timeout")
        let verifier = StubVerifier([StubVerifier.report(status: 0, verdict: .valid), transportError])
        let queue = MemoryJobQueue(jobs: [envelope(), envelope()])
        let engine = engine(queue: queue, store: MemoryReceiptStore(apps: [app]), verifier: verifier)
        try await runEngine(engine) { engine.processedCount == 2 }
        #expect(engine.outcomes == [.validated: 1, .retried: 1])
        #expect(queue.retries.first?.envelope.errorCode == "transport_timeout")
        // However the two jobs were batched, the settles add up to what happened, and nothing is
        // reported for a settle that counted nothing.
        #expect(queue.totalActivity == ActivityTally(outcomes: [.validated: 1, .retried: 1], failures: [.network: 1]))
        #expect(queue.activity.allSatisfy { !$0.isEmpty })
    }

    @Test("Postgres down after Apple answered: the job is retried, not acknowledged, not lost")
    func storeDown() async throws {
        struct Down: Error {}
        let store = MemoryReceiptStore(apps: [app])
        let verifier = HeldVerifier()
        let queue = MemoryJobQueue(jobs: [envelope()])
        let engine = engine(queue: queue, store: store, verifier: verifier)
        try await runEngine(engine) {
            // Apple answers only once the app was read and Postgres went away.
            if verifier.open == 1 {
                store.failure = Down()
                verifier.releaseAll()
            }
            return engine.processedCount == 1
        }
        #expect(engine.outcomes == [.retried: 1])
        #expect(queue.acknowledged.isEmpty)
        #expect(queue.retries.first?.envelope.errorCode == "store_unavailable")
        #expect(queue.inProcessing == 0)
    }

    @Test("Postgres unreachable before the call: the app cannot be read, so the job is retried without calling Apple")
    func storeDownBeforeTheCall() async throws {
        struct Down: Error {}
        let store = MemoryReceiptStore(apps: [app])
        store.failure = Down()
        let verifier = StubVerifier([StubVerifier.report(status: 0, verdict: .valid)])
        let (outcomes, queue, _) = try await run(envelope(), verifier: verifier, store: store)
        #expect(outcomes == [.retried: 1])
        #expect(verifier.requests.isEmpty)
        #expect(queue.retries.first?.envelope.errorCode == "store_unavailable")
    }

    @Test("While the outage circuit is open, jobs are deferred past it without using an attempt; outages open it")
    func circuit() async throws {
        let circuit = MemoryOutageCircuit(policy: CircuitPolicy(minimumFailures: 2, failureRatio: 0.5))
        let outage = VerificationReport(
            verdict: .outage, response: nil,
            calls: [
                AppleCall(endpoint: .production, httpStatus: 503, appleStatus: nil, isRetryable: nil, latencyMs: 1, errorCode: "http_503")
            ],
            errorCode: "http_503")
        let queue = MemoryJobQueue(jobs: [envelope(), envelope()])
        let store = MemoryReceiptStore(apps: [app])
        let verifier = StubVerifier([outage, outage, StubVerifier.report(status: 0, verdict: .valid)])
        let engine = engine(queue: queue, store: store, verifier: verifier, circuit: circuit)
        let third = envelope()
        let pushed = Mutex(false)
        try await runEngine(engine) {
            // Two outages: each retried (attempt used), and together they open the circuit. Then
            // a third job arrives; it must not be sent to Apple at all.
            if engine.processedCount == 2, case .open? = try? circuit.state(now: now), !pushed.withLock({ $0 }) {
                pushed.withLock { $0 = true }
                queue.push(raw: third.encoded())
            }
            return engine.processedCount == 3
        }
        #expect(engine.outcomes == [.retried: 2, .deferred: 1])
        guard case .open(let until) = try circuit.state(now: now) else {
            Issue.record("the circuit should be open")
            return
        }
        #expect(verifier.requests.count == 2)
        let deferred = try #require(queue.retries.last)
        #expect(deferred.envelope.id == third.id)
        #expect(deferred.envelope.attempt == 0)
        #expect(deferred.envelope.errorCode == nil)
        #expect(deferred.runAt >= until)
    }

    @Test("Retries end in the dead letters once the job is older than the maximum age")
    func exhausted() async throws {
        let old = envelope(firstFailedAt: now.addingTimeInterval(-73 * 3600))
        let (outcomes, queue, _) = try await run(old, verifier: StubVerifier([StubVerifier.report(status: 21005, verdict: .transient)]))
        #expect(outcomes == [.dead: 1])
        #expect(queue.dead.count == 1)
    }

    @Test("A poison job (not an envelope) and a job of an unknown app go to the dead letters")
    func poison() async throws {
        let queue = MemoryJobQueue()
        queue.push(raw: [0xFF, 0xFE, 0x00])
        let engine = engine(
            queue: queue, store: MemoryReceiptStore(), verifier: StubVerifier([StubVerifier.report(status: 0, verdict: .valid)]))
        try await runEngine(engine) { engine.processedCount == 1 }
        #expect(engine.outcomes == [.dead: 1])
        #expect(queue.dead == [nil])
        let (outcomes, other, _) = try await run(
            envelope(), verifier: StubVerifier([StubVerifier.report(status: 0, verdict: .valid)]), store: MemoryReceiptStore())
        #expect(outcomes == [.dead: 1])
        #expect(other.dead.first??.errorCode == "unknown_app")
    }
}

@Suite("Worker engine: concurrency, batching, shutdown")
struct WorkerEngineFlowTests {
    let app = AppRecord(id: UUID(), name: "t", bundleID: "b", sharedSecret: nil)

    func jobs(_ count: Int) -> [JobEnvelope] {
        (0..<count).map { _ in
            JobEnvelope(id: JobID.make(), kind: .validate, appID: app.id, enqueuedAt: Date(), origin: .api, receipt: "x")
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
    final class GatedStore: ReceiptStore, @unchecked Sendable {
        let inner: MemoryReceiptStore
        let gate = DispatchSemaphore(value: 0)
        private let lock = NSLock()
        private var sizes: [Int] = []

        init(_ inner: MemoryReceiptStore) { self.inner = inner }

        var batchSizes: [Int] { lock.withLock { sizes } }

        func app(id: UUID) throws -> AppRecord? { try inner.app(id: id) }

        func save(_ records: [ValidationRecord]) throws -> [Result<ReceiptResource?, StoreFailure>] {
            let first = lock.withLock {
                sizes.append(records.count)
                return sizes.count == 1
            }
            if first { gate.wait() }
            return try inner.save(records)
        }
    }

    @Test("Results that arrive while a commit runs are stored together in the next transaction")
    func groupCommit() async throws {
        let queue = MemoryJobQueue(jobs: jobs(40))
        let store = GatedStore(MemoryReceiptStore(apps: [app]))
        let verifier = HeldVerifier()
        let engine = WorkerEngine(
            configuration: .init(concurrency: 40, committers: 1, reserveTimeout: .milliseconds(20)), makeQueue: { _ in queue },
            makeStore: { _ in store }, verifier: verifier, logger: Logger(label: "test"))
        try await runEngine(engine) {
            if verifier.open == 40 {
                verifier.releaseAll()
                // The committer holds the first results in its gated transaction while the rest queue up.
                Thread.sleep(forTimeInterval: 0.2)
                store.gate.signal()
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
            configuration: .init(concurrency: 10, committers: 1, reserveTimeout: .milliseconds(20)), makeQueue: { _ in queue },
            makeStore: { _ in store }, verifier: verifier, logger: Logger(label: "test"))
        let seen = Mutex((calls: 0, inHand: 0, stalledAt: 0))
        try await runEngine(engine) {
            let (open, inHand) = (verifier.open, queue.inProcessing)
            seen.withLock { $0 = (max($0.calls, open), max($0.inHand, inHand), $0.stalledAt) }
            // The first commit hangs (Postgres stalled): answers keep freeing call slots until
            // twice `concurrency` jobs are in hand; then the fetcher waits, and the gate opens.
            if open == 10 { verifier.releaseAll() }
            if inHand == 20, seen.withLock({ $0.stalledAt }) == 0 {
                Thread.sleep(forTimeInterval: 0.1)
                seen.withLock { $0.stalledAt = queue.inProcessing }
                verifier.releaseAll()
                store.gate.signal()
            }
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
            configuration: .init(concurrency: 5, committers: 2, commitLinger: .milliseconds(500), reserveTimeout: .milliseconds(20)),
            makeQueue: { _ in queue }, makeStore: { _ in store }, verifier: verifier, logger: Logger(label: "test"))
        try await runEngine(engine) {
            if verifier.open == 5 {
                // Five answers 10 ms apart: without the linger each would wake a committer alone.
                for _ in 0..<5 {
                    verifier.releaseOne()
                    Thread.sleep(forTimeInterval: 0.01)
                }
            }
            return engine.processedCount == 5
        }
        #expect(store.batchSizes == [5])
        #expect(queue.acknowledged.count == 5)
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

    @Test("Jobs in hand at shutdown finish within the deadline and nothing is requeued")
    func drainsOnShutdown() async throws {
        let queue = MemoryJobQueue(jobs: jobs(5))
        let store = MemoryReceiptStore(apps: [app])
        let abandoned = Mutex(0)
        let verifier = HeldVerifier()
        let engine = WorkerEngine(
            configuration: .init(concurrency: 5, reserveTimeout: .milliseconds(20), shutdownTimeout: .seconds(10)),
            makeQueue: { _ in queue }, makeStore: { _ in store }, verifier: verifier,
            requeueAbandoned: { abandoned.withLock { $0 += 1 } }, logger: Logger(label: "test"))
        let group = ServiceGroup(services: [engine], gracefulShutdownSignals: [], logger: Logger(label: "test"))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            while verifier.open < 5 { try await Task.sleep(for: .milliseconds(5)) }
            await group.triggerGracefulShutdown()
            // Apple answers after the shutdown began: the answers are still stored and acknowledged.
            try await Task.sleep(for: .milliseconds(100))
            verifier.releaseAll()
            try await tasks.waitForAll()
        }
        #expect(abandoned.withLock { $0 } == 0)
        #expect(queue.acknowledged.count == 5)
        #expect(queue.inProcessing == 0)
    }

    @Test("Jobs reserved ahead of the free slots are given back unstarted at shutdown; the started ones finish", .timeLimit(.minutes(1)))
    func givesBackJobsReservedAhead() async throws {
        let queue = MemoryJobQueue(jobs: jobs(20))
        let store = MemoryReceiptStore(apps: [app])
        let abandoned = Mutex(0)
        let verifier = HeldVerifier()
        let engine = WorkerEngine(
            configuration: .init(concurrency: 8, reserveTimeout: .milliseconds(20), shutdownTimeout: .seconds(10)),
            makeQueue: { _ in queue }, makeStore: { _ in store }, verifier: verifier,
            requeueAbandoned: { abandoned.withLock { $0 += 1 } }, logger: Logger(label: "test"))
        let group = ServiceGroup(services: [engine], gracefulShutdownSignals: [], logger: Logger(label: "test"))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            // Eight calls, and a quarter of the concurrency (2) reserved ahead.
            while verifier.open < 8 || queue.inProcessing < 10 { try await Task.sleep(for: .milliseconds(5)) }
            #expect(queue.inProcessing == 10)
            await group.triggerGracefulShutdown()
            // The fetcher gives the two back when it sees the shutdown; only then do the calls end
            // (an answer before it would free a slot for another job).
            while queue.waiting < 12 { try await Task.sleep(for: .milliseconds(5)) }
            verifier.releaseAll()
            try await tasks.waitForAll()
        }
        #expect(abandoned.withLock { $0 } == 0)
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
        func requeueStrays(keeping inFlight: [[UInt8]]) throws -> Int { try inner.requeueStrays(keeping: inFlight) }
        func heartbeat(busy: Int) throws {}
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
