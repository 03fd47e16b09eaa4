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
    @Test("It validates queued jobs and dates Apple's answers by the simulated clock it reads from the clock file; SIGTERM stops it cleanly")
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
        let observed = try #require(
            try await fixture.pg.query(
                "SELECT count(*) AS n, min(observed_at) AS first, max(observed_at) AS last FROM subscriptions WHERE app_id = \(fixture.app.id)"
            ).rows.first)
        #expect(observed.int("n") == jobs)
        let first = try #require(observed.date("first"))
        let last = try #require(observed.date("last"))
        // Read from the file: at or after the simulated start, not the machine's time half a year before.
        #expect(
            first >= simulated.addingTimeInterval(-1) && last <= clock.now().addingTimeInterval(1),
            "observed \(first) … \(last), simulated \(simulated)")
        kill(worker.processIdentifier, SIGTERM)
        worker.waitUntilExit()
        #expect(worker.terminationReason == .exit && worker.terminationStatus == 0)
    }
}
