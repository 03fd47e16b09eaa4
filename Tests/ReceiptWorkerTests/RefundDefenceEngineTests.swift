import Foundation
import Logging
import ReceiptCore
import ReceiptTesting
import Synchronization
import Testing

@testable import ReceiptWorker

@Suite("Worker engine: answers to Apple's consumption requests (mock clock)")
struct RefundDefenceEngineTests {
    let app = AppRecord(id: UUID(), name: "t", bundleID: "b", sharedSecret: nil)

    /// A sender that answers from a script and counts what it was asked.
    final class ScriptedSender: ConsumptionSender, @unchecked Sendable {
        private let state: Mutex<(reports: [ConsumptionReport], sent: [ConsumptionInformation])>

        init(_ reports: [ConsumptionReport]) { state = Mutex((reports, [])) }

        var sent: [ConsumptionInformation] { state.withLock { $0.sent } }

        func send(
            _ body: ConsumptionInformation, transactionID: String, app: AppRecord, environment: AppStoreEnvironment,
            completion: @escaping @Sendable (ConsumptionReport) -> Void
        ) {
            let report = state.withLock { state in
                state.sent.append(body)
                return state.reports.count > 1 ? state.reports.removeFirst() : state.reports[0]
            }
            DispatchQueue.global().async { completion(report) }
        }
    }

    func consumptionJob(deadline: Date) -> JobEnvelope {
        JobEnvelope(
            id: JobID.make(), appID: app.id, enqueuedAt: deadline.addingTimeInterval(-3600), origin: .apple,
            payload: .consumption(ConsumptionJob(notificationID: "n-1", transactionID: "2000000001", deadline: deadline, environment: "sandbox")))
    }

    func store() -> MemoryReceiptStore {
        let store = MemoryReceiptStore(apps: [app])
        store.consumptionFacts = ConsumptionFacts(
            policy: .preferDecline, userIdentifier: "u1", customer: CustomerConsumption(consented: true, consumptionPercentage: 10_000))
        return store
    }

    func engine(_ queue: MemoryJobQueue, _ store: MemoryReceiptStore, _ sender: ScriptedSender, clock: MockClock) -> WorkerEngine {
        WorkerEngine(
            configuration: .init(concurrency: 2, reserveTimeout: .milliseconds(20)), makeQueue: { _ in queue }, makeStore: { _ in store },
            verifier: StubVerifier([StubVerifier.report(status: 0, verdict: .valid)]), consumption: sender, now: clock.closure,
            logger: Logger(label: "test"))
    }

    @Test("Past the deadline (injected clock): a dead letter with consumption_deadline_passed, and nothing sent")
    func deadlinePassed() async throws {
        let clock = MockClock()
        let queue = MemoryJobQueue(jobs: [consumptionJob(deadline: clock.now.addingTimeInterval(-1))])
        let store = store()
        let sender = ScriptedSender([.accepted])
        let engine = engine(queue, store, sender, clock: clock)
        try await runEngine(engine) { engine.processedCount == 1 }
        #expect(queue.dead.compactMap { $0?.errorCode } == [.consumptionDeadlinePassed])
        #expect(sender.sent.isEmpty && store.answers.isEmpty)
    }

    @Test("Two copies of one request in flight together: one claims it and sends, the other settles without a call; a replay sends nothing")
    func copiesSendOnce() async throws {
        let clock = MockClock()
        let deadline = clock.now.addingTimeInterval(3600)
        let queue = MemoryJobQueue(jobs: [consumptionJob(deadline: deadline), consumptionJob(deadline: deadline)])
        let store = store()
        let sender = ScriptedSender([.accepted])
        let engine = engine(queue, store, sender, clock: clock)
        try await runEngine(engine) { engine.processedCount == 2 }
        #expect(sender.sent.count == 1 && queue.acknowledged.count == 2)
        #expect(store.answers.count == 1 && store.answers.first?.body.refundPreference == .decline)
        let replay = MemoryJobQueue(jobs: [consumptionJob(deadline: deadline)])
        let again = self.engine(replay, store, sender, clock: clock)
        try await runEngine(again) { again.processedCount == 1 }
        #expect(sender.sent.count == 1 && store.answers.count == 1 && replay.acknowledged.count == 1)
    }

    @Test("A 5xx goes back to the retry set, due before the deadline")
    func serverErrorRetried() async throws {
        let clock = MockClock()
        let job = consumptionJob(deadline: clock.now.addingTimeInterval(3600))
        let queue = MemoryJobQueue(jobs: [job])
        let store = store()
        let sender = ScriptedSender([.transient(.http(503))])
        let engine = engine(queue, store, sender, clock: clock)
        try await runEngine(engine) { engine.processedCount == 1 }
        #expect(queue.retries.count == 1 && (queue.retries.first?.runAt ?? .distantFuture) < job.consumptionDeadline)
        #expect(queue.retries.first?.envelope.errorCode == .http(503) && store.answers.isEmpty)
    }
}

extension JobEnvelope {
    fileprivate var consumptionDeadline: Date {
        guard case .consumption(let job) = payload else { return .distantPast }
        return job.deadline
    }
}
