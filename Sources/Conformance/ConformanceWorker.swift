import Foundation
import Logging
import ReceiptQueueApp
import ServiceLifecycle
import Telemetry

/// The child's side of ``Faults/workerKilled``: `receiptq conformance-worker --clock-file PATH`,
/// a hidden command the deployment starts. It runs the worker role alone, built as every role
/// is (`ReceiptQueueApp.makeWorker`), with the dates of Apple's answers and its subscriptions'
/// next polls read from the run's simulated clock through the ``ClockFile`` the parent
/// publishes; everything else (Redis,
/// Postgres, the mock App Store's URLs, the secrets key, the trust roots) comes in its
/// environment, as for `receiptq work`. It runs until SIGTERM, or SIGKILL from the driver.
public enum ConformanceWorker {
    /// Runs the worker until SIGTERM; a child whose parent died stops too (its database and keys
    /// are about to go, or are gone).
    public static func run(clockFile: String, configuration: AppConfiguration, logger: Logger) async throws {
        let clock = try ClockFile.Reader(path: clockFile)
        // Its next polls on the simulated clock too: the in-process scheduler claims them on it.
        let worker = try ReceiptQueueApp.makeWorker(
            configuration, metrics: PrometheusExporter(), logger: logger, observedAt: clock.closure, repollClock: clock.closure)
        watchParent(logger: logger)
        try await ReceiptQueueApp.run([worker], logger: logger)
    }

    /// Sends this process SIGTERM once its parent is gone (it is adopted: `getppid` changes), so
    /// that a driver that crashed leaves no worker behind.
    private static func watchParent(logger: Logger) {
        let parent = getppid()
        let thread = Thread {
            while getppid() == parent { usleep(200_000) }
            logger.error("The conformance run that started this worker is gone; stopping")
            kill(getpid(), SIGTERM)
        }
        thread.name = "conformance.parent-watch"
        thread.start()
    }
}
