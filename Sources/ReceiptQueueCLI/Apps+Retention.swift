import ArgumentParser
import Foundation
import ReceiptCore
import ReceiptQueueApp

extension Apps {
    struct Retention: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Shows or sets how many days an app keeps each kind of data (its own, over the deployment's RETENTION_<KIND>_DAYS).",
            discussion: """
                Kinds: apple_call_attempts, notifications, events, webhook_deliveries, audit_log, superseded_receipts \
                (dead_letters is one \
                setting for the deployment). --days 0 keeps forever; --default goes back to the deployment's setting. \
                Without --kind, prints every kind's days. Audited as app.retention. Purchases, subscriptions and the \
                ledger are never dropped.
                """)
        @Option(help: "The app's name.") var app: String
        @Option(help: "The kind of data.") var kind: String?
        @Option(help: "Days kept (0: forever).") var days: Int?
        @Flag(help: "Back to the deployment's setting.") var `default` = false

        func validate() throws {
            if let days, !RetentionPolicy.isValid(days: days) { throw ValidationError("--days must be 0 (forever) to \(RetentionPolicy.maxDays)") }
            if days != nil && `default` { throw ValidationError("--days and --default exclude each other") }
            if kind != nil && days == nil && !`default` { throw ValidationError("--kind needs --days or --default") }
            if kind == nil && (days != nil || `default`) { throw ValidationError("--days and --default need --kind") }
        }

        func run() async throws {
            let runtime = try ReceiptQueueApp.Runtime.bootstrap(label: "apps")
            let admin = try runtime.admin(label: "apps")
            defer { admin.close() }
            let record = try admin.requiredApp(named: app)
            if let kind {
                guard let value = RetentionKind(rawValue: kind), value.isPerApp else {
                    let kinds = RetentionKind.allCases.filter(\.isPerApp).map(\.rawValue).joined(separator: ", ")
                    throw ValidationError("--kind must be one of \(kinds)")
                }
                try admin.setRetention(appID: record.id, kind: value, days: days, audit: AuditAction.commandLine("app.retention"))
            }
            let own = try admin.retention(appID: record.id)
            for line in Self.describe(policy: runtime.configuration.retention.policy, own: own) { print(line) }
        }

        /// One line per kind: its days, and whether they are the app's own.
        static func describe(policy: RetentionPolicy, own: [RetentionOverride]) -> [String] {
            RetentionKind.allCases.map { kind in
                let override = own.first { $0.kind == kind }?.days
                let days = policy.days(kind, override: override)
                return "\(kind.rawValue): \(days == 0 ? "forever" : "\(days) days")\(override == nil ? " (deployment)" : "")"
            }
        }
    }
}
