import Foundation
import Logging
import ReceiptCore
import ReceiptTesting
import ReceiptWorker
import ServiceLifecycle
import Synchronization
import SystemTesting
import Testing

/// Runs `engine` in a service group until `done` holds (polled every 5 ms, 4,000 polls: 20 s on an
/// idle machine; `eventually` counts polls, not wall time), then shuts it down gracefully. The
/// tests' assertions after it tell whether `done` was reached.
func runEngine(_ engine: WorkerEngine, until done: @escaping @Sendable () -> Bool) async throws {
    let group = ServiceGroup(services: [engine], gracefulShutdownSignals: [], logger: Logger(label: "test"))
    try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        _ = try await eventually(timeout: .seconds(20), interval: .milliseconds(5)) { done() }
        await group.triggerGracefulShutdown()
        try await tasks.waitForAll()
    }
}

/// A verifier that keeps every call open until the test releases it: Apple taking its time.
final class HeldVerifier: ReceiptVerifier, @unchecked Sendable {
    private let lock = NSLock()
    private var held: [@Sendable (ValidationOutcome) -> Void] = []
    private let report: ValidationOutcome

    init(_ report: ValidationOutcome = StubVerifier.report(status: 0, verdict: .valid)) { self.report = report }

    var open: Int { lock.withLock { held.count } }

    func verify(_ request: ValidationRequest, completion: @escaping @Sendable (ValidationOutcome) -> Void) {
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
            id: JobID.make(), appID: app.id, enqueuedAt: now, origin: .api,
            payload: .receipt(ReceiptJob(receipt: "MIIx", style: .unified, bundleID: "com.example")))
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
        forged.payload.receiptJob?.fraudReason = "untrusted_chain"
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
        #expect(retry.envelope.errorCode == .apple(21005))
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
        #expect(queue.dead.first??.errorCode == .sharedSecretMismatch)
        #expect(store.saved.first?.status == .failed)
        #expect(queue.totalActivity == ActivityTally(outcomes: [.dead: 1], failures: [.configuration: 1]))
    }

    @Test("The settle carries the batch's activity: outcomes, and the failure class of each retry")
    func activity() async throws {
        let transportError = ValidationOutcome(
            verdict: .outage,
            calls: [
                AppleCall(
                    endpoint: .production, httpStatus: nil, appleStatus: nil, isRetryable: nil, latencyMs: 15_000, errorCode: .transport(.timeout))
            ], failure: .transport(.timeout))
        let verifier = StubVerifier([StubVerifier.report(status: 0, verdict: .valid), transportError])
        let queue = MemoryJobQueue(jobs: [envelope(), envelope()])
        let engine = engine(queue: queue, store: MemoryReceiptStore(apps: [app]), verifier: verifier)
        try await runEngine(engine) { engine.processedCount == 2 }
        #expect(engine.outcomes == [.validated: 1, .retried: 1])
        #expect(queue.retries.first?.envelope.errorCode == .transport(.timeout))
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
        #expect(queue.retries.first?.envelope.errorCode == .storeUnavailable)
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
        #expect(queue.retries.first?.envelope.errorCode == .storeUnavailable)
    }

    @Test("While the outage circuit is open, jobs are deferred past it without using an attempt; outages open it")
    func circuit() async throws {
        let circuit = MemoryOutageCircuit(policy: CircuitPolicy(minimumFailures: 2, failureRatio: 0.5))
        let outage = ValidationOutcome(
            verdict: .outage,
            calls: [
                AppleCall(endpoint: .production, httpStatus: 503, appleStatus: nil, isRetryable: nil, latencyMs: 1, errorCode: .http(503))
            ],
            failure: .http(503))
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
        #expect(other.dead.first??.errorCode == .unknownApp)
    }
}
