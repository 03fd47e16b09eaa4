import ArgumentParser
import Foundation
import ReceiptQueueApp

struct All: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Runs every role in one process: API, workers, scheduler, and (unless APPSTORE_PRODUCTION_URL is set) the mock App Store.")

    @Flag(help: "Register a demo app, forge a demo receipt, and print the curl commands to try it.")
    var demo = false

    @Option(help: "Where the demo keeps its test CA and request file.")
    var demoDirectory = ".local/demo"

    func run() async throws {
        let runtime = try ReceiptQueueApp.Runtime.bootstrap(label: "all")
        try runtime.migrateAtStart()
        // The mock App Store and the demo are dev tools: DevCommands.swift adds them.
        try await run(runtime)
    }
}
