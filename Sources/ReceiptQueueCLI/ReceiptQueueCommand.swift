import ArgumentParser
import Foundation
import ReceiptQueueApp

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
            OperatorsCommand.self, ImportCommand.self, SupportCommand.self, EntitlementsCommand.self, CustomersCommand.self,
            ConformanceCommand.self, ConformanceWorkerCommand.self,
        ])

    /// Runs the parsed subcommand with NIO's event loops as Swift Concurrency's executor (see
    /// `ReceiptQueueApp.Runtime.installExecutor()` for why).
    static func main() async {
        ReceiptQueueApp.Runtime.installExecutor()
        await main(nil)
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Runs the ingestion API.")

    func run() async throws {
        try await ReceiptQueueApp.Runtime.bootstrap(label: "serve").serve()
    }
}

struct Work: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Runs the worker pool.")

    @Option(help: "Validations in flight in this process (overrides WORKER_CONCURRENCY).")
    var concurrency: Int?

    func run() async throws {
        try await ReceiptQueueApp.Runtime.bootstrap(label: "work").work(concurrency: concurrency)
    }
}

struct Schedule: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Runs the scheduler: retry promotion, the janitor, subscription re-polls and the notification history sweep.")

    func run() async throws {
        try await ReceiptQueueApp.Runtime.bootstrap(label: "schedule").schedule()
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Applies pending database migrations.")

    func run() async throws {
        let applied = try ReceiptQueueApp.Runtime.bootstrap(label: "migrate").migrate()
        print(applied.isEmpty ? "Database is up to date." : "Applied: \(applied.joined(separator: ", "))")
    }
}

/// Runs `body`, showing the app's usage errors as the command's own (with its help, exit status 64).
func usage<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as UsageError {
        throw ValidationError(error.description)
    }
}
