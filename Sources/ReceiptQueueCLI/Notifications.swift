import ArgumentParser
import Foundation
import ReceiptCore
import ReceiptQueueApp

struct NotificationsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notifications", abstract: "App Store Server Notifications: check that Apple's reach receiptq.",
        subcommands: [Test.self, NotificationStatus.self])

    struct Test: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Asks Apple for a TEST notification and reports when receiptq stored it.",
            discussion: """
                Uses the app's In-App Purchase key (Request a Test Notification), then waits until the notification is in
                Postgres, or the timeout. Exit 0 when it arrived, 1 when it did not (Apple's delivery attempts are printed).
                """)
        @Option(help: "The app's name.") var app: String
        @Option(help: "production or sandbox.") var environment: String = "sandbox"
        @Option(help: "Seconds to wait for the notification.") var timeout: Int = 60

        func run() async throws {
            guard let environment = AppStoreEnvironment(rawValue: environment) else {
                throw ValidationError("--environment is production or sandbox")
            }
            let runtime = try ReceiptQueueApp.Runtime.bootstrap(label: "notifications")
            let admin = try runtime.admin(label: "notifications")
            defer { admin.close() }
            let record = try admin.requiredApp(named: app)
            guard record.serverAPIKey != nil else {
                throw ValidationError(
                    "the app has no usable In-App Purchase key (add one with `receiptq apps server-api-key`, and set RECEIPTQ_SECRETS_KEY)")
            }
            // The support desk's client: Apple's 1 call/s for test notifications is kept by the
            // shared rate limiter, counted as support, and the request is audited.
            let session = try ReceiptQueueApp.SupportSession(runtime.configuration, logger: runtime.logger)
            defer { session.close() }
            guard try await admin.testNotification(app: record, environment: environment, timeout: timeout, session: session, say: { print($0) })
            else { throw ExitCode(1) }
        }
    }
}
