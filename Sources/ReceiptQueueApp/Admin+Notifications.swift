import Foundation
import PostgresStore
import ReceiptCore

extension ReceiptQueueApp.Admin {
    /// `receiptq notifications test`: asks Apple for a TEST notification through `session`'s
    /// support desk (the app's In-App Purchase key, the shared rate limit and call accounting, an
    /// audit line), then waits until the notification is stored, or `timeout` seconds.
    /// - Parameters:
    ///   - app: an app whose key is open (``AppRecord/serverAPIKey``).
    ///   - say: told each line to show the operator (the request, the arrival, Apple's attempts).
    /// - Returns: whether the notification arrived in time (false too when Apple refused the request).
    public func testNotification(
        app: AppRecord, environment: AppStoreEnvironment, timeout: Int, session: ReceiptQueueApp.SupportSession, say: (String) -> Void
    ) async throws -> Bool {
        let desk = session.desk
        let started = Date()
        let token: String
        do {
            let action = AuditAction.commandLine("support.test_notification").on(app: app.id, target: environment.rawValue)
            token = try await session.run(action) { try await desk.requestTestNotification(appID: app.id, environment: environment) }
        } catch {
            say("Apple refused the request: \(error)")
            return false
        }
        say("Asked Apple (\(environment.rawValue)) for a TEST notification.")
        var attempts: [TestNotificationStatus.Attempt] = []
        var uuid: String?
        while Date().timeIntervalSince(started) < Double(timeout) {
            if uuid == nil, let status = try? await desk.testNotificationStatus(appID: app.id, token: token, environment: environment) {
                attempts = status.attempts
                uuid = status.notificationUUID
            }
            if let uuid, let arrival = try await PostgresNotificationLog.arrival(appID: app.id, notificationUUID: uuid, on: connection) {
                let seconds = String(format: "%.1f", arrival.storedAt.timeIntervalSince(started))
                say("Arrived: notification \(uuid) stored \(seconds) s after the request (\(arrival.outcome ?? "recorded")).")
                return true
            }
            try await Task.sleep(for: .milliseconds(500))
        }
        if let status = try? await desk.testNotificationStatus(appID: app.id, token: token, environment: environment) {
            attempts = status.attempts
        }
        say("Not stored within \(timeout) s.")
        if attempts.isEmpty {
            say("Apple has not tried to send it yet.")
        } else {
            for attempt in attempts { say("Apple's attempt at \(attempt.date): \(attempt.result)") }
            say("Check the URL Apple has (`receiptq apps notification-url`), that serve is reachable from the internet, and its logs.")
        }
        return false
    }
}
