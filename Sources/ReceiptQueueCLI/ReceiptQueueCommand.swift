import ArgumentParser
import Foundation
import Logging
import Metrics
import NIOCore
import NIOPosix
import ReceiptQueueApp
import ServiceLifecycle
import Telemetry

/// `receiptq`: one executable, one subcommand per role. It parses arguments and calls
/// `ReceiptQueueApp`; nothing else lives here.
@main
struct ReceiptQueueCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receiptq",
        abstract: "Validates App Store receipts asynchronously and durably.",
        subcommands: [
            All.self, Serve.self, Work.self, Schedule.self, Migrate.self, Apps.self, DeadLetterCommand.self, MockAppStoreCommand.self,
            Forge.self, ReceiptCommand.self, NotificationsCommand.self, WebhooksCommand.self,
            OperatorsCommand.self, ImportCommand.self,
        ])

    /// Runs the parsed subcommand with NIO's event loops as Swift Concurrency's executor.
    ///
    /// A request handler otherwise resumes on the cooperative pool and hops back to an event loop
    /// to answer: two more thread switches a request on two cores. Measured with `scripts/bench
    /// ingest` (same build, alternating): context switches per request 2.2 → 1.2, server CPU per
    /// request −15 %. Safe because no request handler blocks inside a task: sockets and C calls hop
    /// to their own dispatch queues (`ConfinedQueue`), the worker and scheduler loops run on their
    /// own threads; what does block an event loop is brief and outside serving (the intake's wait
    /// of up to a second for its result channel at start-up, its listener's stop at shutdown).
    static func main() async {
        // Before the first task is enqueued: jobs already on the default pool would stay there.
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        await main(nil)
    }
}

/// The process's metrics registry: every role records into it, `/metrics` renders it.
let metrics: PrometheusExporter = {
    let exporter = PrometheusExporter()
    MetricsSystem.bootstrap(exporter)
    return exporter
}()

/// The role's services, with the metrics listener when `METRICS_PORT` is set.
func withMetricsServer(_ services: [any Service], _ configuration: AppConfiguration, logger: Logger) -> [any Service] {
    // Started first, so it stops last: a final scrape still sees the drain.
    [ReceiptQueueApp.makeMetricsServer(configuration, metrics: metrics, logger: logger)].compactMap { $0 } + services
}

/// Reads the configuration and sets up logging once per process.
func bootstrap(label: String) throws -> (AppConfiguration, Logger) {
    // libcurl runs with CURLOPT_NOSIGNAL and expects the application to ignore SIGPIPE; a peer
    // that resets a socket must cost one failed call, not the process.
    signal(SIGPIPE, SIG_IGN)
    let configuration = try AppConfiguration()
    let level = configuration.logLevel
    LoggingSystem.bootstrap { label in
        var handler: any LogHandler =
            switch configuration.logFormat {
            case .text: StreamLogHandler.standardError(label: label)
            case .json: JSONLogHandler.standardError(label: label)
            }
        handler.logLevel = level
        return handler
    }
    var logger = Logger(label: "receiptq.\(label)")
    logger.logLevel = level
    return (configuration, logger)
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Runs the ingestion API.")

    func run() async throws {
        let (configuration, logger) = try bootstrap(label: "serve")
        let api = try ReceiptQueueApp.makeAPI(configuration, metrics: metrics, logger: logger)
        try await ReceiptQueueApp.run(withMetricsServer([api], configuration, logger: logger), logger: logger)
    }
}

struct Work: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Runs the worker pool.")

    @Option(help: "Validations in flight in this process (overrides WORKER_CONCURRENCY).")
    var concurrency: Int?

    func run() async throws {
        var (configuration, logger) = try bootstrap(label: "work")
        if let concurrency { configuration.workerConcurrency = concurrency }
        let worker = try ReceiptQueueApp.makeWorker(configuration, metrics: metrics, logger: logger)
        try await ReceiptQueueApp.run(withMetricsServer([worker], configuration, logger: logger), logger: logger)
    }
}

struct Schedule: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Runs the scheduler: retry promotion, the janitor, subscription re-polls and the notification history sweep.")

    func run() async throws {
        let (configuration, logger) = try bootstrap(label: "schedule")
        var services: [any Service] = [
            ReceiptQueueApp.makeScheduler(configuration, metrics: metrics, logger: logger),
            ReceiptQueueApp.makeWebhookDispatcher(configuration, metrics: metrics, logger: logger),
        ]
        if let history = try ReceiptQueueApp.makeNotificationSweep(configuration, metrics: metrics, logger: logger) {
            services.append(history.service)
        } else {
            logger.info("Notification history is not swept: it needs RECEIPTQ_TRUST_ROOTS_DIR and RECEIPTQ_SECRETS_KEY")
        }
        try await ReceiptQueueApp.run(withMetricsServer(services, configuration, logger: logger), logger: logger)
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Applies pending database migrations.")

    func run() async throws {
        let (configuration, logger) = try bootstrap(label: "migrate")
        let applied = try ReceiptQueueApp.migrate(configuration, logger: logger)
        print(applied.isEmpty ? "Database is up to date." : "Applied: \(applied.joined(separator: ", "))")
    }
}
