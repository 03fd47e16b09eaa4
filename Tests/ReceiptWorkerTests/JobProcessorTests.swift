import Foundation
import Logging
import ReceiptCore
import ReceiptTesting
import ReceiptWorker
import ServiceLifecycle
import Synchronization
import Testing

@Suite("Job processor: Apple's verdicts become the right transitions")
struct JobProcessorTests {
    let app = AppRecord(id: UUID(), name: "t", bundleID: "com.example", sharedSecret: "s3cret")
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    let logger = Logger(label: "test")

    func envelope(firstFailedAt: Date? = nil) -> JobEnvelope {
        var envelope = JobEnvelope(
            id: JobID.make(), kind: .validate, appID: app.id, enqueuedAt: now, origin: .api, receipt: "MIIx", style: .unified,
            bundleID: "com.example")
        envelope.firstFailedAt = firstFailedAt
        return envelope
    }

    func run(
        _ envelope: JobEnvelope, verifier: StubVerifier, store: MemoryReceiptStore? = nil
    ) throws -> (
        JobOutcome, MemoryJobQueue, MemoryReceiptStore
    ) {
        let queue = MemoryJobQueue(jobs: [envelope])
        let store = store ?? MemoryReceiptStore(apps: [app])
        let processor = JobProcessor(retryPolicy: RetryPolicy(), now: { [now] in now })
        var rng = SeededGenerator(seed: 1)
        let job = try #require(try queue.reserve(timeout: .zero))
        let outcome = try processor.process(
            job, on: WorkerLane(queue: queue, store: store, verifier: verifier), logger: logger, using: &rng)
        return (outcome, queue, store)
    }

    @Test("Valid: stored with its purchases, then acknowledged with the resource for the waiting API")
    func valid() throws {
        let transaction: JSONValue = .object([
            "transaction_id": .string("1000"), "original_transaction_id": .string("1000"), "product_id": .string("p1"),
            "quantity": .string("1"), "purchase_date_ms": .string("1700000000000"),
        ])
        let verifier = StubVerifier([StubVerifier.report(status: 0, verdict: .valid, transactions: [transaction])])
        let (outcome, queue, store) = try run(envelope(), verifier: verifier)
        #expect(outcome == .validated)
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
    func invalid() throws {
        let (outcome, queue, store) = try run(envelope(), verifier: StubVerifier([StubVerifier.report(status: 21003, verdict: .invalid)]))
        #expect(outcome == .invalid)
        #expect(store.saved.first?.status == .invalid)
        #expect(queue.retries.isEmpty && queue.dead.isEmpty)
    }

    @Test("Transient (21005): retried in seconds with the attempt counted and the call recorded")
    func transient() throws {
        let (outcome, queue, store) = try run(envelope(), verifier: StubVerifier([StubVerifier.report(status: 21005, verdict: .transient)]))
        #expect(outcome == .retried)
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
    func sharedSecretMismatch() throws {
        let (outcome, queue, store) = try run(
            envelope(), verifier: StubVerifier([StubVerifier.report(status: 21004, verdict: .configurationError)]))
        #expect(outcome == .dead)
        #expect(queue.dead.first??.errorCode == "shared_secret_mismatch")
        #expect(store.saved.first?.status == .failed)
    }

    @Test("Postgres down after Apple answered: the job is retried, not acknowledged, not lost")
    func storeDown() throws {
        struct Down: Error {}
        let store = MemoryReceiptStore(apps: [app])
        let queue = MemoryJobQueue(jobs: [envelope()])
        let processor = JobProcessor(retryPolicy: RetryPolicy(), now: { [now] in now })
        var rng = SeededGenerator(seed: 1)
        let job = try #require(try queue.reserve(timeout: .zero))
        store.failure = Down()
        let outcome = try processor.process(
            job, on: WorkerLane(queue: queue, store: store, verifier: StubVerifier([StubVerifier.report(status: 0, verdict: .valid)])),
            logger: logger, using: &rng)
        #expect(outcome == .retried)
        #expect(queue.acknowledged.isEmpty)
        #expect(queue.retries.first?.envelope.errorCode == "store_unavailable")
    }

    @Test("While the outage circuit is open, jobs are deferred past it without using an attempt; outages open it")
    func circuit() throws {
        let circuit = MemoryOutageCircuit(policy: CircuitPolicy(minimumFailures: 2, failureRatio: 0.5))
        let outage = VerificationReport(
            verdict: .outage, response: nil,
            calls: [AppleCall(endpoint: .production, httpStatus: 503, appleStatus: nil, isRetryable: nil, latencyMs: 1, errorCode: "http_503")],
            errorCode: "http_503")
        let queue = MemoryJobQueue(jobs: [envelope(), envelope(), envelope()])
        let store = MemoryReceiptStore(apps: [app])
        let lane = WorkerLane(queue: queue, store: store, verifier: StubVerifier([outage]), circuit: circuit)
        let processor = JobProcessor(retryPolicy: RetryPolicy(), now: { [now] in now })
        var rng = SeededGenerator(seed: 3)
        // Two outages: each retried (attempt used), and the second opens the circuit.
        for _ in 0..<2 {
            let job = try #require(try queue.reserve(timeout: .zero))
            #expect(try processor.process(job, on: lane, logger: logger, using: &rng) == .retried)
        }
        guard case .open(let until) = try circuit.state(now: now) else {
            Issue.record("the circuit should be open")
            return
        }
        // The third job is not sent to Apple at all.
        let third = try #require(try queue.reserve(timeout: .zero))
        let verifier = StubVerifier([StubVerifier.report(status: 0, verdict: .valid)])
        let guarded = WorkerLane(queue: queue, store: store, verifier: verifier, circuit: circuit)
        #expect(try processor.process(third, on: guarded, logger: logger, using: &rng) == .deferred)
        #expect(verifier.requests.isEmpty)
        let deferred = try #require(queue.retries.last)
        #expect(deferred.envelope.attempt == 0)
        #expect(deferred.envelope.errorCode == nil)
        #expect(deferred.runAt >= until)
    }

    @Test("Retries end in the dead letters once the job is older than the maximum age")
    func exhausted() throws {
        let old = envelope(firstFailedAt: now.addingTimeInterval(-73 * 3600))
        let (outcome, queue, _) = try run(old, verifier: StubVerifier([StubVerifier.report(status: 21005, verdict: .transient)]))
        #expect(outcome == .dead)
        #expect(queue.dead.count == 1)
    }

    @Test("A poison job (not an envelope) and a job of an unknown app go to the dead letters")
    func poison() throws {
        let queue = MemoryJobQueue()
        queue.push(raw: [0xFF, 0xFE, 0x00])
        let processor = JobProcessor(retryPolicy: RetryPolicy(), now: { [now] in now })
        var rng = SeededGenerator(seed: 1)
        let lane = WorkerLane(queue: queue, store: MemoryReceiptStore(), verifier: StubVerifier([StubVerifier.report(status: 0, verdict: .valid)]))
        #expect(try processor.process(try #require(try queue.reserve(timeout: .zero)), on: lane, logger: logger, using: &rng) == .dead)
        let (outcome, other, _) = try run(
            envelope(), verifier: StubVerifier([StubVerifier.report(status: 0, verdict: .valid)]), store: MemoryReceiptStore())
        #expect(outcome == .dead)
        #expect(other.dead.first??.errorCode == "unknown_app")
    }
}

@Suite("Worker pool")
struct WorkerPoolTests {
    @Test("Lanes drain the queue, then graceful shutdown stops them")
    func drainsAndStops() async throws {
        let app = AppRecord(id: UUID(), name: "t", bundleID: "b", sharedSecret: nil)
        let jobs = (0..<50).map { _ in
            JobEnvelope(id: JobID.make(), kind: .validate, appID: app.id, enqueuedAt: Date(), origin: .api, receipt: "x")
        }
        let queue = MemoryJobQueue(jobs: jobs)
        let store = MemoryReceiptStore(apps: [app])
        let verifier = StubVerifier([StubVerifier.report(status: 0, verdict: .valid)])
        let pool = WorkerPool(
            configuration: .init(concurrency: 4, reserveTimeout: .milliseconds(20)),
            makeLane: { _ in WorkerLane(queue: queue, store: store, verifier: verifier) }, logger: Logger(label: "test"))
        let group = ServiceGroup(services: [pool], gracefulShutdownSignals: [], logger: Logger(label: "test"))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            let deadline = ContinuousClock.now + .seconds(20)
            while pool.processedCount < 50, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(pool.processedCount == 50)
        #expect(queue.acknowledged.count == 50)
        #expect(Set(store.saved.map(\.envelope.id)) == Set(jobs.map(\.id)))
    }
}

@Suite("Worker pool shutdown")
struct WorkerPoolShutdownTests {
    /// Apple taking far longer than the shutdown deadline.
    final class SlowVerifier: ReceiptVerifier, @unchecked Sendable {
        func verify(_ request: VerificationRequest) -> VerificationReport {
            Thread.sleep(forTimeInterval: 10)
            return StubVerifier.report(status: 0, verdict: .valid)
        }
    }

    @Test("Past the shutdown deadline, the pool hands the busy lanes' jobs back and returns")
    func abandonsBusyLanesAtTheDeadline() async throws {
        let app = AppRecord(id: UUID(), name: "t", bundleID: "b", sharedSecret: nil)
        let queue = MemoryJobQueue(
            jobs: (0..<2).map { _ in
                JobEnvelope(id: JobID.make(), kind: .validate, appID: app.id, enqueuedAt: Date(), origin: .api, receipt: "x")
            })
        let store = MemoryReceiptStore(apps: [app])
        let abandoned = Mutex<[Int]>([])
        let pool = WorkerPool(
            configuration: .init(concurrency: 2, reserveTimeout: .milliseconds(20), shutdownTimeout: .milliseconds(300)),
            makeLane: { _ in WorkerLane(queue: queue, store: store, verifier: SlowVerifier()) },
            requeueAbandoned: { lanes in abandoned.withLock { $0 = lanes } }, logger: Logger(label: "test"))
        let group = ServiceGroup(services: [pool], gracefulShutdownSignals: [], logger: Logger(label: "test"))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            while queue.inProcessing < 2 { try await Task.sleep(for: .milliseconds(10)) }
            let started = ContinuousClock.now
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            // Returned at the deadline (0.3 s), not after the 10 s calls; the margin absorbs a loaded machine.
            #expect(ContinuousClock.now - started < .seconds(8))
        }
        #expect(abandoned.withLock { $0 } == [0, 1])
        #expect(store.saved.isEmpty)
    }

    @Test("Lanes that finish within the deadline are not requeued")
    func cleanShutdown() async throws {
        let abandoned = Mutex<[Int]?>(nil)
        let pool = WorkerPool(
            configuration: .init(concurrency: 3, reserveTimeout: .milliseconds(20), shutdownTimeout: .seconds(5)),
            makeLane: { _ in
                WorkerLane(
                    queue: MemoryJobQueue(), store: MemoryReceiptStore(), verifier: StubVerifier([StubVerifier.report(status: 0, verdict: .valid)]))
            },
            requeueAbandoned: { lanes in abandoned.withLock { $0 = lanes } }, logger: Logger(label: "test"))
        let group = ServiceGroup(services: [pool], gracefulShutdownSignals: [], logger: Logger(label: "test"))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await Task.sleep(for: .milliseconds(100))
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(abandoned.withLock { $0 } == nil)
    }
}
