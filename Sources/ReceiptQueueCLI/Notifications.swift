import AppStoreClient
import ArgumentParser
import Foundation
import Libpq
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptQueueApp

struct NotificationsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notifications", abstract: "App Store Server Notifications: check that Apple's reach receiptq.",
        subcommands: [Test.self])

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
            let (configuration, logger) = try bootstrap(label: "notifications")
            let connection = try PostgresConnection(configuration: configuration.postgres, label: "notifications", logger: logger)
            defer { connection.close() }
            let admin = AppAdmin(connection: connection, secrets: try configuration.secretsKey.map { try SecretBox(key: $0) })
            let record = try admin.requiredApp(named: app)
            guard record.serverAPIKey != nil else {
                throw ValidationError(
                    "the app has no usable In-App Purchase key (add one with `receiptq apps server-api-key`, and set RECEIPTQ_SECRETS_KEY)")
            }
            let client = try ServerNotificationsClient(configuration: configuration.serverAPI)
            let started = Date()
            let token: String
            do {
                token = try await client.requestTest(app: record, environment: environment)
            } catch {
                print("Apple refused the request: \(error)")
                throw ExitCode(1)
            }
            print("Asked Apple (\(environment.rawValue)) for a TEST notification.")
            var attempts: [ServerNotificationsClient.TestStatus.Attempt] = []
            var uuid: String?
            while Date().timeIntervalSince(started) < Double(timeout) {
                if uuid == nil, let status = try? await client.testStatus(app: record, environment: environment, token: token) {
                    attempts = status.attempts
                    uuid =
                        status.signedPayload.flatMap { try? CompactJWS($0) }.flatMap { try? JSONValue.parse($0.payload) }?[
                            "notificationUUID"]?.stringValue
                }
                if let uuid, let arrival = try await PostgresNotificationLog.arrival(appID: record.id, notificationUUID: uuid, on: connection) {
                    let seconds = String(format: "%.1f", arrival.storedAt.timeIntervalSince(started))
                    print("Arrived: notification \(uuid) stored \(seconds) s after the request (\(arrival.outcome ?? "recorded")).")
                    return
                }
                try await Task.sleep(for: .milliseconds(500))
            }
            if let status = try? await client.testStatus(app: record, environment: environment, token: token) { attempts = status.attempts }
            print("Not stored within \(timeout) s.")
            if attempts.isEmpty {
                print("Apple has not tried to send it yet.")
            } else {
                for attempt in attempts { print("Apple's attempt at \(attempt.date): \(attempt.result)") }
                print("Check the URL Apple has (`receiptq apps notification-url`), that serve is reachable from the internet, and its logs.")
            }
            throw ExitCode(1)
        }
    }
}
