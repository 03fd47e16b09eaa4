import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

@testable import ReceiptWorker

@Suite("Job planner: subscriptions and re-polls (mock clock)")
struct JobPlannerTests {
    let clock = MockClock()
    var planner: JobPlanner { JobPlanner(retryPolicy: RetryPolicy(), now: clock.closure) }

    func envelope(kind: JobKind = .validate, target: RepollTarget? = nil) -> JobEnvelope {
        JobEnvelope(
            id: JobID.make(), appID: UUID(), enqueuedAt: clock.now, origin: kind == .repoll ? .scheduler : .api,
            payload: .sample(kind, environment: "sandbox", target: target))
    }

    func subscription(expiresIn seconds: TimeInterval) -> JSONValue {
        func ms(_ date: Date) -> JSONValue { .string(String(Int64(date.timeIntervalSince1970 * 1000))) }
        return .object([
            "transaction_id": .string("11"), "original_transaction_id": .string("10"), "product_id": .string("monthly"),
            "purchase_date_ms": ms(clock.now.addingTimeInterval(seconds - 30 * 86_400)),
            "expires_date_ms": ms(clock.now.addingTimeInterval(seconds)),
        ])
    }

    @Test("A valid answer carries each subscription's state, observed now, with its next poll planned before expiry")
    func validAnswerPlansPolls() throws {
        var rng = SeededGenerator(seed: 1)
        let report = StubVerifier.report(status: 0, verdict: .valid, transactions: [subscription(expiresIn: 10 * 86_400)], at: clock.now)
        guard case .store(let record) = planner.plan(envelope(), outcome: report, using: &rng) else {
            Issue.record("a valid answer is stored")
            return
        }
        let planned = try #require(record.subscriptions.first)
        #expect(record.subscriptions.count == 1)
        #expect(planned.state.status == .active)
        #expect(planned.state.observedAt == clock.now)
        let next = try #require(planned.nextPollAt)
        #expect(next > clock.now.addingTimeInterval(8 * 86_400))
        #expect(next < clock.now.addingTimeInterval(9 * 86_400))
    }

    @Test("Invalid answers and configuration errors carry no subscription state")
    func noStateWithoutAValidAnswer() {
        var rng = SeededGenerator(seed: 2)
        let invalid = StubVerifier.report(status: 21010, verdict: .invalid, transactions: [subscription(expiresIn: 86_400)], at: clock.now)
        if case .store(let record) = planner.plan(envelope(), outcome: invalid, using: &rng) {
            #expect(record.subscriptions.isEmpty)
            #expect(record.status == .invalid)
        } else {
            Issue.record("an invalid answer is stored")
        }
    }

    @Test("21002 for a locally decoded receipt is retried a bounded number of times, then stored invalid with its code")
    func malformedIsBounded() throws {
        var rng = SeededGenerator(seed: 3)
        let planner = JobPlanner(retryPolicy: RetryPolicy(malformedAttempts: 3), now: clock.closure)
        let report = StubVerifier.report(status: 21002, verdict: .transient, transactions: [])
        var job = envelope()
        job.payload.receiptJob?.style = .unified
        for attempt in 1...2 {
            guard case .retry(let updated, _, _) = planner.plan(job, outcome: report, using: &rng) else {
                Issue.record("attempt \(attempt) is retried")
                return
            }
            #expect(updated.attempt == attempt)
            job = updated
        }
        guard case .store(let record) = planner.plan(job, outcome: report, using: &rng) else {
            Issue.record("the third 21002 is stored")
            return
        }
        #expect(record.status == .invalid)
        #expect(record.errorCode == .apple(21002))
        #expect(record.storedErrorCode == FailureCode.apple(21002).rawValue)
        #expect(record.appleStatus == 21002)
        // A receipt that never decoded here has no local voucher: 21002 stays an ordinary retry.
        var undecoded = job
        undecoded.payload.receiptJob?.style = nil
        guard case .retry = planner.plan(undecoded, outcome: report, using: &rng) else {
            Issue.record("an undecoded receipt keeps retrying")
            return
        }
    }

    @Test("A valid answer after failed attempts stores no error code; an invalid one stores its own")
    func errorCodeOfTheResult() throws {
        var rng = SeededGenerator(seed: 4)
        let earlier = envelope().failed(code: .apple(21008), message: "x", calls: [], at: clock.now)
        guard case .store(let valid) = planner.plan(earlier, outcome: StubVerifier.report(status: 0, verdict: .valid, transactions: []), using: &rng),
            case .store(let invalid) = planner.plan(
                earlier, outcome: StubVerifier.report(status: 21010, verdict: .invalid, transactions: []), using: &rng)
        else {
            Issue.record("both answers are stored")
            return
        }
        #expect(valid.storedErrorCode == nil)
        #expect(invalid.storedErrorCode == FailureCode.apple(21010).rawValue)
    }

    @Test("A buried re-poll asks for its subscription to be polled again a day later; a buried validation does not")
    func buriedRepoll() {
        let target = RepollTarget(originalTransactionID: "10", receiptID: UUID(), pollSequence: 3)
        let repollTrace = planner.buriedTrace(
            envelope(kind: .repoll, target: target).failed(code: .sharedSecretMismatch, message: "x", calls: [], at: clock.now))
        guard case .record(let repoll) = repollTrace, case .record(let validation) = planner.buriedTrace(envelope()) else {
            Issue.record("a buried re-poll and a buried validation each leave a record")
            return
        }
        #expect(repoll.retryPollAt == clock.now.addingTimeInterval(86_400))
        #expect(repoll.isRepoll)
        #expect(repoll.receiptID == target.receiptID)
        #expect(validation.retryPollAt == nil)
        #expect(!validation.isRepoll)
    }

    @Test("A buried delivery leaves its dead outcome for the delivery log, a buried notification nothing but its dead letter")
    func buriedDeliveryAndNotification() {
        let delivery = envelope(kind: .webhook).failed(code: .http(503), message: "x", calls: [], at: clock.now)
        guard case .delivery(let outcome) = planner.buriedTrace(delivery), case .delivery(let job) = delivery.payload else {
            Issue.record("a buried delivery leaves a delivery outcome")
            return
        }
        #expect(outcome.target == job.target && outcome.status == .dead && outcome.attempts == 1)
        #expect(outcome.httpStatus == 503 && outcome.errorCode == .http(503))
        #expect(planner.buriedTrace(envelope(kind: .notification)) == nil)
        #expect(planner.deliveryAttemptOutcome(delivery)?.status == .retrying)
        #expect(planner.deliveryAttemptOutcome(envelope()) == nil)
    }

    @Test("A re-poll job's envelope round-trips with its target")
    func envelopeRoundTrip() throws {
        let target = RepollTarget(originalTransactionID: "1000000123", receiptID: UUID(), pollSequence: 7)
        let original = envelope(kind: .repoll, target: target)
        let decoded = try JobEnvelope.decode(original.encoded())
        #expect(decoded.payload.repollJob?.target == target)
        #expect(decoded.kind == .repoll)
    }
}

@Suite("Job planner: what Postgres could not store")
struct JobPlannerStoreFailureTests {
    let clock = MockClock()
    var planner: JobPlanner { JobPlanner(retryPolicy: RetryPolicy(), now: clock.closure) }
    let envelope = JobEnvelope(id: JobID.make(), appID: UUID(), enqueuedAt: Date(), origin: .api, payload: .receipt(ReceiptJob(receipt: "MII")))

    @Test("A refused value is buried on the first failure with the SQLSTATE; an unreachable database is retried")
    func refusedIsBuried() {
        let refused = planner.storeRefused(
            envelope, calls: [], failure: StoreFailure(code: .sqlState("22021"), message: "Postgres refused the record: NUL", isPermanent: true))
        guard case .bury(let buried?) = refused else {
            Issue.record("a refused record is buried, not \(refused)")
            return
        }
        #expect(buried.attempt == 1)
        #expect(buried.errorCode == .storeRefused)
        #expect(buried.errorMessage == "Postgres refused the record: NUL (SQLSTATE 22021)")
        var rng = SeededGenerator(seed: 7)
        guard case .retry(let retried, _, .retried) = planner.storeUnavailable(envelope, calls: [], using: &rng) else {
            Issue.record("an unreachable database is retried")
            return
        }
        #expect(retried.errorCode == .storeUnavailable)
    }
}

@Suite("Worker metrics: Apple's status classes")
struct WorkerMetricsStatusClassTests {
    @Test("Every HTTP status falls in one of five bounded classes; no answer is `transport`")
    func classes() {
        typealias StatusClass = WorkerMetrics.StatusClass
        #expect(StatusClass(httpStatus: 200) == .success)
        #expect(StatusClass(httpStatus: 204) == .success)
        #expect(StatusClass(httpStatus: 302) == .redirect)
        #expect(StatusClass(httpStatus: 401) == .client)
        #expect(StatusClass(httpStatus: 499) == .client)
        #expect(StatusClass(httpStatus: 500) == .server)
        #expect(StatusClass(httpStatus: 503) == .server)
        #expect(StatusClass(httpStatus: 100) == .server)
        #expect(StatusClass(httpStatus: 999) == .server)
        #expect(StatusClass(httpStatus: nil) == .transport)
        #expect(StatusClass.allCases.map(\.rawValue) == ["2xx", "3xx", "4xx", "5xx", "transport"])
    }
}
