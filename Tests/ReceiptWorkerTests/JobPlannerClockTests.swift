import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

@testable import ReceiptWorker

/// The planner's two clocks: the job's own (validation time, retries: the machine's) and the one a
/// subscription's times are planned on (`observedAt`: the scheduler's re-poll clock).
@Suite("Job planner: a subscription's polls on the re-poll clock (mock clocks)")
struct JobPlannerClockTests {
    /// The machine's clock, and a re-poll clock 29.5 days ahead of it (a conformance run's simulated time).
    let machine = MockClock(start: Date(timeIntervalSince1970: 1_800_000_000))
    let simulated = MockClock(start: Date(timeIntervalSince1970: 1_800_000_000 + 29.5 * 86_400))
    var expires: Date { machine.now.addingTimeInterval(30 * 86_400) }

    /// A monthly subscription that expires 30 days after the machine's now: half a day after the re-poll clock's.
    var report: ValidationOutcome {
        func ms(_ date: Date) -> JSONValue { .string(String(Int64(date.timeIntervalSince1970 * 1000))) }
        let transaction: JSONValue = .object([
            "transaction_id": .string("11"), "original_transaction_id": .string("10"), "product_id": .string("monthly"),
            "purchase_date_ms": ms(machine.now), "expires_date_ms": ms(machine.now.addingTimeInterval(30 * 86_400)),
        ])
        return StubVerifier.report(status: 0, verdict: .valid, transactions: [transaction], at: simulated.now)
    }

    func envelope() -> JobEnvelope {
        JobEnvelope(id: JobID.make(), appID: UUID(), enqueuedAt: machine.now, origin: .api, payload: .sample(.validate, environment: "sandbox"))
    }

    @Test("With a re-poll clock: the next poll is planned from its now, the record's subscription times on it, the validation on the job's")
    func plansOnTheRepollClock() throws {
        var rng = SeededGenerator(seed: 3)
        let planner = JobPlanner(retryPolicy: RetryPolicy(), now: machine.closure, observedAt: simulated.closure)
        guard case .store(let record) = planner.plan(envelope(), outcome: report, using: &rng) else {
            Issue.record("a valid answer is stored")
            return
        }
        let next = try #require(record.subscriptions.first?.nextPollAt)
        // On the re-poll clock the day's lead before the expiry has passed: the poll looks for
        // the renewal just after the expiry (half an hour, jittered), not a day before it.
        let after = RepollPolicy().maxAfter.seconds
        #expect(next >= expires.addingTimeInterval(after) && next <= expires.addingTimeInterval(after * 1.25))
        #expect(record.plannedAt == simulated.now)
        #expect(record.validatedAt == machine.now)
    }

    @Test("Without one (production): both on the job's clock, as before")
    func plansOnTheJobClockByDefault() throws {
        var rng = SeededGenerator(seed: 3)
        let planner = JobPlanner(retryPolicy: RetryPolicy(), now: machine.closure)
        guard case .store(let record) = planner.plan(envelope(), outcome: report, using: &rng) else {
            Issue.record("a valid answer is stored")
            return
        }
        let next = try #require(record.subscriptions.first?.nextPollAt)
        // On the machine's clock the expiry is a month away: a day's lead before it (jittered earlier).
        #expect(next <= expires.addingTimeInterval(-86_400) && next >= expires.addingTimeInterval(-1.25 * 86_400))
        #expect(record.plannedAt == machine.now)
    }

    @Test("A buried re-poll's retry of its subscription is planned on the re-poll clock; the dead letter is dated on the job's")
    func buriedRepollOnTheRepollClock() throws {
        let planner = JobPlanner(retryPolicy: RetryPolicy(), now: machine.closure, observedAt: simulated.closure)
        let target = RepollTarget(originalTransactionID: "10", receiptID: UUID(), pollSequence: 1)
        let repoll = JobEnvelope(
            id: JobID.make(), appID: UUID(), enqueuedAt: machine.now, origin: .scheduler,
            payload: .sample(.repoll, environment: "sandbox", target: target))
        guard case .record(let record) = planner.buriedTrace(repoll.failed(code: .unknown, message: "x", calls: [], at: machine.now)) else {
            Issue.record("a buried re-poll leaves a record")
            return
        }
        #expect(record.retryPollAt == simulated.now.addingTimeInterval(RepollPolicy().troubleInterval.seconds))
        #expect(record.validatedAt == machine.now)
    }
}
