import ArgumentParser
import Foundation
import Logging
import ReceiptQueueApp
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
            Forge.self, ReceiptCommand.self,
        ])
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
        try await ReceiptQueueApp.run([try ReceiptQueueApp.makeAPI(configuration, logger: logger)], logger: logger)
    }
}

struct Work: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Runs the worker pool.")

    @Option(help: "Validations in flight in this process (overrides WORKER_CONCURRENCY).")
    var concurrency: Int?

    func run() async throws {
        var (configuration, logger) = try bootstrap(label: "work")
        if let concurrency { configuration.workerConcurrency = concurrency }
        try await ReceiptQueueApp.run([ReceiptQueueApp.makeWorker(configuration, logger: logger)], logger: logger)
    }
}

struct Schedule: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Runs the scheduler: retry promotion, the janitor and subscription re-polls.")

    func run() async throws {
        let (configuration, logger) = try bootstrap(label: "schedule")
        try await ReceiptQueueApp.run([ReceiptQueueApp.makeScheduler(configuration, logger: logger)], logger: logger)
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
