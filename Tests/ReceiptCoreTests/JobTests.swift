import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

@Suite("Jobs: ids, envelopes, backoff")
struct JobTests {
    @Test("UUIDv7 ids carry the time and sort by it")
    func uuidV7() {
        var rng = SeededGenerator(seed: 1)
        let a = JobID.make(at: Date(timeIntervalSince1970: 1_700_000_000), using: &rng)
        let b = JobID.make(at: Date(timeIntervalSince1970: 1_700_000_001), using: &rng)
        #expect(a.uuidString.lowercased().hasPrefix("018bcfe5-6800-7"))
        #expect(a.uuidString < b.uuidString)
        #expect(Set((0..<1000).map { _ in JobID.make() }).count == 1000)
    }

    @Test("An envelope round-trips through its JSON, and a failure records history")
    func envelope() throws {
        let envelope = JobEnvelope(
            id: JobID.make(), appID: UUID(), enqueuedAt: Date(timeIntervalSince1970: 1_700_000_000.5), origin: .api,
            payload: .receipt(
                ReceiptJob(
                    receipt: "MIIabc", style: .unified, bundleID: "com.example",
                    submission: Submission(userIdentifier: "u1", metadata: .object(["k": .number(1)])))))
        #expect(try JobEnvelope.decode(envelope.encoded()) == envelope)
        let call = AppleCall(endpoint: .production, httpStatus: 503, appleStatus: nil, isRetryable: nil, latencyMs: 3, errorCode: .http(503))
        let failed = envelope.failed(
            code: .http(503), message: String(repeating: "x", count: 500), calls: [call], at: Date(timeIntervalSince1970: 1_700_000_100))
        #expect(failed.attempt == 1)
        #expect(failed.errorMessage?.count == 200)
        #expect(failed.history == [call])
        #expect(failed.firstFailedAt != nil)
        #expect(try JobEnvelope.decode(failed.encoded()) == failed)
    }

    @Test("An operator's retry gives a dead letter a fresh retry budget and keeps its history")
    func requeuedBudget() {
        let start = Date(timeIntervalSince1970: 1_700_000_000)
        var dead = JobEnvelope(id: JobID.make(), appID: UUID(), enqueuedAt: start, origin: .api, payload: .receipt(ReceiptJob(receipt: "MIIabc")))
        let call = AppleCall(endpoint: .production, httpStatus: 503, appleStatus: nil, isRetryable: nil, latencyMs: 3, errorCode: .http(503))
        for step in 0..<20 { dead = dead.failed(code: .http(503), message: "down", calls: [call], at: start + Double(step * 4 * 3600)) }
        let policy = RetryPolicy()
        var rng = SeededGenerator(seed: 3)
        let now = start + 80 * 3600
        // Past its 72 h: one more failure would bury it again at once.
        #expect(dead.attempt == 20 && policy.nextRun(attempt: 21, firstFailedAt: start, now: now, using: &rng) == nil)

        let retried = dead.requeued(by: .cli)
        #expect(retried.attempt == 0 && retried.firstFailedAt == nil && retried.lastFailedAt == nil)
        #expect(retried.errorCode == nil && retried.errorMessage == nil && retried.origin == .cli)
        #expect(retried.history == dead.history && retried.history.count == 20)
        // Its next failure is a first one: retried within the first backoff, not an hour later.
        let failedAgain = retried.failed(code: .http(503), message: "down", calls: [call], at: now)
        let next = policy.nextRun(attempt: failedAgain.attempt, firstFailedAt: failedAgain.firstFailedAt ?? now, now: now, using: &rng)
        #expect(failedAgain.attempt == 1)
        #expect(next.map { $0.timeIntervalSince(now) <= 2 } == true)
    }

    @Test("A newer envelope version or garbage is refused")
    func unknownVersion() {
        #expect(throws: (any Error).self) { try JobEnvelope.decode(Array(#"{"v":99}"#.utf8)) }
        #expect(throws: (any Error).self) { try JobEnvelope.decode([0xFF, 0x00]) }
    }

    @Test("Backoff grows from seconds to the cap and stays within its bounds, spread over the whole window")
    func backoffBounds() {
        let policy = RetryPolicy(base: .seconds(2), cap: .seconds(3600), maxAge: .seconds(72 * 3600))
        var rng = SeededGenerator(seed: 42)
        let start = Date(timeIntervalSince1970: 0)
        for attempt in 1...30 {
            let ceiling = min(2 * pow(2, Double(attempt - 1)), 3600)
            for _ in 0..<50 {
                let runAt = policy.nextRun(attempt: attempt, firstFailedAt: start, now: start, using: &rng)!
                let delay = runAt.timeIntervalSince(start)
                #expect(delay >= 0.2 - 0.001 && delay <= ceiling + 0.001, "attempt \(attempt): \(delay)")
            }
        }
        // Full jitter: the delays of one attempt cover the window, not just its upper half.
        let delays = (0..<2000).map { _ in policy.nextRun(attempt: 10, firstFailedAt: start, now: start, using: &rng)!.timeIntervalSince(start) }
        #expect(delays.min()! < 1024 * 0.1 && delays.max()! > 1024 * 0.9)
        #expect(policy.ceiling(attempt: 1) == .seconds(2))
        #expect(policy.ceiling(attempt: 100) == .seconds(3600))
    }

    @Test("A job is given up once its first failure is older than the maximum age")
    func giveUp() {
        let policy = RetryPolicy(base: .seconds(2), cap: .seconds(3600), maxAge: .seconds(3600 * 72))
        var rng = SeededGenerator(seed: 7)
        let first = Date(timeIntervalSince1970: 0)
        #expect(policy.nextRun(attempt: 5, firstFailedAt: first, now: first.addingTimeInterval(3600), using: &rng) != nil)
        #expect(policy.nextRun(attempt: 5, firstFailedAt: first, now: first.addingTimeInterval(72 * 3600), using: &rng) == nil)
    }

    @Test("API timestamps have Mbaasy's shape")
    func timestamps() {
        let stamp = APITimestamp(Date(timeIntervalSince1970: 1_519_641_347.834))
        #expect(stamp.utc == "2018-02-26 10:35:47 UTC")
        #expect(stamp.ms == 1_519_641_347_834)
    }
}
