import ArgumentParser
import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp

struct Apps: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Registers apps and manages their API tokens.", subcommands: [Add.self, List.self, RotateToken.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Registers an app and prints its first API token.")
        @Option(help: "A unique name for the app.") var name: String
        @Option(help: "The app's bundle id.") var bundleId: String
        @Option(help: "The App Store shared secret (or set RECEIPTQ_SHARED_SECRET, which stays out of `ps`).")
        var sharedSecret: String?
        @Flag(help: "Send exclude-old-transactions to Apple.") var excludeOldTransactions = false

        func run() async throws {
            let (configuration, _) = try bootstrap(label: "apps")
            let connection = try PostgresConnection(configuration: configuration.postgres, label: "apps")
            defer { connection.close() }
            let secret = sharedSecret ?? ProcessInfo.processInfo.environment["RECEIPTQ_SHARED_SECRET"]
            let (app, token) = try AppAdmin(connection: connection).addApp(
                name: name, bundleID: bundleId, sharedSecret: secret, excludeOldTransactions: excludeOldTransactions)
            print("app_id: \(app.id.uuidString.lowercased())\ntoken: \(token)")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Lists registered apps (secrets are not shown).")

        func run() async throws {
            let (configuration, _) = try bootstrap(label: "apps")
            let connection = try PostgresConnection(configuration: configuration.postgres, label: "apps")
            defer { connection.close() }
            for app in try AppAdmin(connection: connection).listApps() {
                print("\(app.id.uuidString.lowercased())  \(app.name)  \(app.bundleID)  secret: \(app.sharedSecret == nil ? "no" : "yes")")
            }
        }
    }

    struct RotateToken: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-token", abstract: "Issues a new API token; older tokens are revoked unless --keep-old.")
        @Option(help: "The app's name.") var name: String
        @Flag(help: "Keep the app's older tokens working.") var keepOld = false

        func run() async throws {
            let (configuration, _) = try bootstrap(label: "apps")
            let connection = try PostgresConnection(configuration: configuration.postgres, label: "apps")
            defer { connection.close() }
            let admin = AppAdmin(connection: connection)
            guard let app = try admin.app(named: name) else { throw ValidationError("no app named \(name)") }
            print("token: \(try admin.rotateToken(appID: app.id, revokingOthers: !keepOld))")
        }
    }
}
