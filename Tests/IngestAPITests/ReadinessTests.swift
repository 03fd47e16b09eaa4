import Foundation
import ReceiptCore
import Synchronization
import Testing

@testable import IngestAPI

/// `/health/ready`'s check: Redis and Postgres both, one check per half second whoever asks.
@Suite("Readiness: Redis and Postgres, checked at most once per half second")
struct ReadinessTests {
    /// Postgres stand-in whose pings are counted, answer as told, and (when gated) wait until let go.
    final class PingedCatalog: ReceiptCatalog {
        let reachable = Mutex(true)
        let pings = Atomic(0)
        /// While set, a ping announces itself here and waits for ``release``.
        let gate = Mutex<(started: AsyncStream<Void>.Continuation, release: AsyncStream<Void>)?>(nil)

        func authenticate(token: String) async throws -> AppRecord? { nil }
        func receipt(id: UUID, appID: UUID) async throws -> ReceiptResource? { nil }
        func softphoneCredentials(username: String) async throws -> SoftphoneCredentials? { nil }
        func notificationApp(name: String, token: String) async throws -> AppRecord? { nil }

        func ping() async -> Bool {
            pings.add(1, ordering: .relaxed)
            // Only the first ping is held: a second one (a probe that did not share the check)
            // counts and answers at once.
            let held = gate.withLock { gate in
                defer { gate = nil }
                return gate
            }
            if let (started, release) = held {
                started.yield()
                for await _ in release { break }
            }
            return reachable.withLock { $0 }
        }
    }

    /// Probes on their way in.
    final class Tally: Sendable {
        let count = Atomic(0)
    }

    /// A clock the test moves by hand.
    final class HandClock: Sendable {
        let start = ContinuousClock.now
        let offset = Mutex(Duration.zero)
        func now() -> ContinuousClock.Instant { start + offset.withLock { $0 } }
        func advance(_ by: Duration) { offset.withLock { $0 += by } }
    }

    @Test("Probes within half a second read the last check; later ones check again and see Postgres go and come back")
    func cachedForHalfASecond() async {
        let catalog = PingedCatalog()
        let clock = HandClock()
        let readiness = Readiness(intake: StubIntake(.queued), catalog: catalog, now: clock.now)
        #expect(await readiness.report() == .init(redis: true, postgres: true))
        catalog.reachable.withLock { $0 = false }
        clock.advance(.milliseconds(499))
        #expect(await readiness.report().isReady, "still the last check's result")
        #expect(catalog.pings.load(ordering: .relaxed) == 1)

        clock.advance(.milliseconds(1))
        let down = await readiness.report()
        #expect(!down.isReady)
        #expect(down.status == "postgres unreachable")
        #expect(catalog.pings.load(ordering: .relaxed) == 2)

        catalog.reachable.withLock { $0 = true }
        clock.advance(.milliseconds(500))
        #expect(await readiness.report().status == "ok", "a recovery shows at the next check")
    }

    @Test("Probes that arrive during a check wait for that check: one ping for all of them")
    func concurrentProbesShareOneCheck() async {
        let catalog = PingedCatalog()
        let (started, startedContinuation) = AsyncStream<Void>.makeStream()
        let (release, releaseContinuation) = AsyncStream<Void>.makeStream()
        catalog.gate.withLock { $0 = (startedContinuation, release) }
        // The check waits for the twenty probes to arrive, which on a loaded machine took longer than
        // the default 2 s patience once (every probe then read "postgres unreachable"); this test is
        // about sharing one check, so its patience is out of the way.
        let readiness = Readiness(
            intake: StubIntake(.queued), catalog: catalog, patience: .seconds(300), now: HandClock().now)
        await withTaskGroup(of: Bool.self) { group in
            group.addTask { await readiness.report().isReady }
            for await _ in started { break }
            // The check is running (its ping waits): these find it and wait for it.
            let arrived = Tally()
            for _ in 0..<20 {
                group.addTask {
                    arrived.count.add(1, ordering: .relaxed)
                    return await readiness.report().isReady
                }
            }
            // The check ends only once all twenty are on their way into it.
            while arrived.count.load(ordering: .relaxed) < 20 { await Task.yield() }
            for _ in 0..<20 { await Task.yield() }
            releaseContinuation.yield()
            releaseContinuation.finish()
            var answers = 0
            for await ready in group {
                #expect(ready)
                answers += 1
            }
            #expect(answers == 21)
        }
        #expect(catalog.pings.load(ordering: .relaxed) == 1)
    }

    @Test("A server that does not answer within the check's patience (a partition) counts as unreachable")
    func silentServerIsUnreachable() async {
        let catalog = PingedCatalog()
        let (started, startedContinuation) = AsyncStream<Void>.makeStream()
        let (release, releaseContinuation) = AsyncStream<Void>.makeStream()
        catalog.gate.withLock { $0 = (startedContinuation, release) }
        let readiness = Readiness(intake: StubIntake(.queued), catalog: catalog, patience: .milliseconds(50), now: HandClock().now)
        // The ping waits until released, as one on a partitioned connection would for minutes.
        #expect(await readiness.report() == .init(redis: true, postgres: false))
        for await _ in started { break }
        releaseContinuation.finish()
    }

    @Test("Redis down, Postgres down, or both: the status names what does not answer")
    func statusNamesWhatIsDown() async {
        let catalog = PingedCatalog()
        catalog.reachable.withLock { $0 = false }
        let both = await Readiness(intake: StubIntake(.down), catalog: catalog, now: HandClock().now).report()
        #expect(both.status == "redis and postgres unreachable")
        let redis = await Readiness(intake: StubIntake(.down), catalog: PingedCatalog(), now: HandClock().now).report()
        #expect(redis.status == "redis unreachable")
        #expect(!redis.isReady)
    }
}
