import Conformance
import Foundation
import Libpq
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// `receiptq conformance-worker`, the worker process a conformance run under `--faults killed`
/// starts: the worker role alone, on the run's simulated clock read from the file its parent
/// publishes (the conformance run itself cannot tell: its answers came out right with the child
/// on the machine's clock too).
@Suite("The conformance run's worker process", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct ConformanceWorkerTests {
    @Test(
        "It validates queued jobs and plans their subscriptions' polls by the simulated clock it reads from the clock file; SIGTERM stops it cleanly"
    )
    func readsTheSimulatedClock() async throws {
        let jobs = 20
        let fixture = try await WorkerProcessFixture(
            jobs: jobs, appleDelay: .milliseconds(1), worker: ["WORKER_CONCURRENCY": "4", "WORKER_SHUTDOWN_TIMEOUT_SECONDS": "10"],
            serverAPI: true)
        defer { Task { await fixture.close() } }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("rqt-clock-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        // Half a year ahead of the machine, as a run's clock is once its customers' months have passed.
        let simulated = Date().addingTimeInterval(180 * 86_400)
        let clock = SimulatedClock(start: simulated)
        clock.publish(to: try ClockFile.Writer(path: path))
        let worker = try startProcess(ReceiptqExecutable.url, ["conformance-worker", "--clock-file", path], environment: fixture.environment)
        #expect(try await eventually(timeout: .seconds(120)) { try fixture.stored() == jobs }, "\((try? fixture.whereabouts()) ?? "")")
        let rows = try #require(
            try await fixture.pg.query(
                """
                SELECT count(*) AS n, min(next_poll_at) AS first, max(observed_at) AS signed
                FROM subscriptions WHERE app_id = \(fixture.app.id)
                """
            ).rows.first)
        #expect(rows.int("n") == jobs)
        let first = try #require(rows.date("first"))
        // Planned from the file's time: at or after the simulated start. On the machine's clock every
        // poll would fall before the month the mock's subscriptions run from the machine's now.
        #expect(first >= simulated.addingTimeInterval(-1), "first poll planned at \(first), simulated \(simulated)")
        // The states themselves are dated by Apple's answers (the mock here signs on the machine's clock).
        let signed = try #require(rows.date("signed"))
        #expect(signed < simulated.addingTimeInterval(-86_400), "observed \(signed), simulated \(simulated)")
        kill(worker.processIdentifier, SIGTERM)
        worker.waitUntilExit()
        #expect(worker.terminationReason == .exit && worker.terminationStatus == 0)
    }
}
