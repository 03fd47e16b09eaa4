import Foundation
import ReceiptCore
import RedisJobQueue

extension AppConfiguration {
    /// How long each kind of data is kept, and how the scheduler's retention step deletes
    /// (`RETENTION_*`; issue 44).
    public struct Retention: Sendable {
        /// The deployment's days per kind (`RETENTION_<KIND>_DAYS`, 0 keeps forever; an app may
        /// keep its own with `receiptq apps retention`).
        public var policy: RetentionPolicy
        /// How often the step runs (`RETENTION_INTERVAL_SECONDS`, default 3600; it also runs on start).
        public var interval: Duration
        /// Rows per delete statement (`RETENTION_BATCH_SIZE`, default 1000): bounds each batch's locks.
        public var batchSize: Int
        /// The pause between two batches (`RETENTION_BATCH_PAUSE_MS`, default 50), so the deletes
        /// leave the database to the validations.
        public var batchPause: Duration

        /// The trim every burial does (`RETENTION_DEAD_LETTERS_DAYS`; 0 keeps them for the longest
        /// setting, a hundred years), besides the 10,000 letters cap.
        public var deadLetters: RedisWorkQueue.DeadLetterRetention {
            let days = policy.days(.deadLetters)
            return RedisWorkQueue.DeadLetterRetention(maxAge: .seconds(policy.daySeconds * (days == 0 ? RetentionPolicy.maxDays : days)))
        }

        init(_ environment: EnvironmentReader) throws {
            // Spelled out, one line a kind: the ops check reads the variables from these files.
            func days(_ variable: String, _ kind: RetentionKind) throws -> Int {
                try environment.int(variable, kind.defaultDays, range: 0...RetentionPolicy.maxDays)
            }
            policy = RetentionPolicy(
                days: [
                    .appleCallAttempts: try days("RETENTION_APPLE_CALL_ATTEMPTS_DAYS", .appleCallAttempts),
                    .notifications: try days("RETENTION_NOTIFICATIONS_DAYS", .notifications),
                    .events: try days("RETENTION_EVENTS_DAYS", .events),
                    .webhookDeliveries: try days("RETENTION_WEBHOOK_DELIVERIES_DAYS", .webhookDeliveries),
                    .auditLog: try days("RETENTION_AUDIT_LOG_DAYS", .auditLog),
                    .deadLetters: try days("RETENTION_DEAD_LETTERS_DAYS", .deadLetters),
                    .supersededReceipts: try days("RETENTION_SUPERSEDED_RECEIPTS_DAYS", .supersededReceipts),
                ], daySeconds: try environment.int("RETENTION_DAY_SECONDS", 86_400, range: 1...86_400))
            interval = .seconds(try environment.int("RETENTION_INTERVAL_SECONDS", 3600, range: 10...86_400))
            batchSize = try environment.int("RETENTION_BATCH_SIZE", 1000, range: 1...100_000)
            batchPause = .milliseconds(try environment.int("RETENTION_BATCH_PAUSE_MS", 50, range: 0...60_000))
        }
    }
}
