import ArgumentParser
import Foundation
import ReceiptCore
import ReceiptQueueApp

/// `receiptq support …`: the App Store Server API's support endpoints with the app's In-App
/// Purchase key, each audited (`support.*`, actor `cli:<login>`) before Apple is called.
struct SupportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "support", abstract: "Customer support at Apple: order look-up, refunds, renewal extensions, app account tokens.",
        subcommands: [OrderLookup.self, Refunds.self, Extend.self, MassExtend.self, MassStatus.self, AppAccountToken.self, TestNotification.self])

    /// The options every support command shares.
    struct Target: ParsableArguments {
        @Option(help: "The app's name.") var app: String
        @Option(help: "production or sandbox.") var environment: String = "production"

        var parsedEnvironment: AppStoreEnvironment {
            get throws {
                guard let value = AppStoreEnvironment(rawValue: environment) else { throw ValidationError("--environment is production or sandbox") }
                return value
            }
        }
    }

    /// Opens the app and the desk, runs `body`, and turns the desk's errors into the operator's messages.
    static func withDesk(
        _ target: Target, label: String, _ body: (AppRecord, ReceiptQueueApp.SupportSession, AppStoreEnvironment) async throws -> Void
    ) async throws {
        let environment = try target.parsedEnvironment
        let runtime = try ReceiptQueueApp.Runtime.bootstrap(label: label)
        let admin = try runtime.admin(label: label)
        let app: AppRecord
        do {
            defer { admin.close() }
            app = try admin.requiredApp(named: target.app)
        }
        let session = try ReceiptQueueApp.SupportSession(runtime.configuration, logger: runtime.logger)
        defer { session.close() }
        do {
            try await body(app, session, environment)
        } catch let problem as SupportInputError {
            throw ValidationError("\(problem.field.replacingOccurrences(of: "_", with: "-")) \(problem.reason)")
        } catch let failure as SupportFailure {
            FileHandle.standardError.write(Data("receiptq: \(failure.description) [\(failure.code)]\n".utf8))
            throw ExitCode(1)
        }
    }

    static func show(_ transaction: SupportTransaction) {
        let dates = [
            transaction.purchaseDate.map { "purchased \($0)" }, transaction.expiresDate.map { "expires \($0)" },
            transaction.revocationDate.map { "refunded \($0)" },
        ].compactMap { $0 }
        print(
            "  \(transaction.transactionID) (original \(transaction.originalTransactionID)) \(transaction.productID) \(dates.joined(separator: ", "))"
        )
    }

    struct OrderLookup: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "order-lookup", abstract: "Looks up a customer's order id; their purchases are validated and stored for --user.")
        @OptionGroup var target: Target
        @Option(name: .customLong("order-id"), help: "The order id from the customer's App Store e-mail.") var orderID: String
        @Option(help: "The user identifier to store the purchases for.") var user: String?

        func run() async throws {
            try await withDesk(target, label: "support") { app, session, environment in
                let action = AuditAction.commandLine("support.order_lookup").on(
                    app: app.id, target: "order \(orderID)", users: user.map { [$0] } ?? [])
                let counted: @Sendable (OrderLookupResult) -> Int? = { $0.queued }
                let found = try await session.run(action, jobCount: counted) {
                    try await session.desk.lookUpOrder(appID: app.id, orderID: orderID, userIdentifier: user, environment: environment)
                }
                print("Order \(orderID): \(found.transactions.count) purchase(s), \(found.queued) queued to be validated and stored.")
                found.transactions.forEach(show)
            }
        }
    }

    struct Refunds: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Shows a customer's refunds (Get Refund History); refunds receiptq did not know are applied.")
        @OptionGroup var target: Target
        @Option(name: .customLong("transaction-id"), help: "Any transaction id of the customer.") var transactionID: String

        func run() async throws {
            try await withDesk(target, label: "support") { app, session, environment in
                try RenewalExtension.checkTransactionID(transactionID, field: "transaction_id")
                let action = AuditAction.commandLine("support.refund_history").on(app: app.id, target: "transaction \(transactionID)")
                let counted: @Sendable (RefundHistoryResult) -> Int? = { $0.applied }
                let found = try await session.run(action, jobCount: counted) {
                    try await session.desk.refundHistory(appID: app.id, transactionID: transactionID, environment: environment)
                }
                print("\(found.refunded.count) refund(s) at Apple; \(found.applied) queued to be applied.")
                found.refunded.forEach(show)
            }
        }
    }

    struct Extend: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Extends one subscription's renewal date (at most 90 days).")
        @OptionGroup var target: Target
        @Option(name: .customLong("original-transaction-id")) var originalTransactionID: String
        @Option(help: "Days, 1–90.") var days: Int
        @Option(help: "0 undeclared, 1 customer satisfaction, 2 other, 3 service issue or outage.") var reason: Int = 1
        @Option(name: .customLong("request-id"), help: "A UUID (default: a new one); the same one again extends once.") var requestID: String?

        func run() async throws {
            try await withDesk(target, label: "support") { app, session, environment in
                let request = try RenewalExtension(
                    originalTransactionID: originalTransactionID, days: days, reason: reason, requestIdentifier: try uuid(requestID))
                let action = AuditAction.commandLine("support.extend").on(
                    app: app.id, target: "subscription \(originalTransactionID) by \(days) days (reason \(reason))")
                let result = try await session.run(action) { try await session.desk.extendRenewal(appID: app.id, request, environment: environment) }
                guard result.succeeded else {
                    print("Apple did not extend \(originalTransactionID): not eligible (not active, or over 365 days this year).")
                    throw ExitCode(1)
                }
                print("Extended \(originalTransactionID) by \(days) days\(result.effectiveDate.map { "; it now renews on \($0)" } ?? "").")
            }
        }
    }

    struct MassExtend: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "mass-extend", abstract: "Extends every active subscriber of a product; follow it with `support mass-status`.")
        @OptionGroup var target: Target
        @Option(help: "The product id.") var product: String
        @Option(help: "Days, 1–90.") var days: Int
        @Option(help: "0 undeclared, 1 customer satisfaction, 2 other, 3 service issue or outage.") var reason: Int = 1
        @Option(help: "Storefronts, comma-separated ISO 3166-1 alpha-3 codes (default: all).") var storefronts: String?
        @Option(name: .customLong("request-id"), help: "A UUID (default: a new one).") var requestID: String?

        func run() async throws {
            try await withDesk(target, label: "support") { app, session, environment in
                let codes = storefronts.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } } ?? []
                let request = try MassRenewalExtension(
                    productID: product, days: days, reason: reason, requestIdentifier: try uuid(requestID), storefrontCountryCodes: codes)
                let action = AuditAction.commandLine("support.mass_extend").on(app: app.id, target: "product \(product) by \(days) days")
                let record = try await session.run(action) {
                    try await session.desk.massExtend(
                        appID: app.id, request, environment: environment, requestedBy: AuditAction.commandLine("").actor)
                }
                print("Apple took request \(record.requestIdentifier.uuidString.lowercased()) for \(product).")
            }
        }
    }

    struct MassStatus: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "mass-status", abstract: "The app's mass extensions; with --request-id, asks Apple how that one is going.")
        @OptionGroup var target: Target
        @Option(name: .customLong("request-id")) var requestID: String?

        func run() async throws {
            try await withDesk(target, label: "support") { app, session, _ in
                let records: [MassExtensionRecord]
                if let requestID {
                    let id = try uuid(requestID)
                    let action = AuditAction.commandLine("support.mass_extension_status").on(app: app.id, target: "request \(requestID)")
                    guard
                        let record = try await session.run(
                            action, { try await session.desk.refreshMassExtension(appID: app.id, requestIdentifier: id) })
                    else { throw ValidationError("no mass extension \(requestID) of \(app.name)") }
                    records = [record]
                } else {
                    records = try await session.desk.massExtensions(appID: app.id, limit: 50)
                }
                if records.isEmpty { print("No mass extensions.") }
                for record in records {
                    let state =
                        record.isComplete
                        ? "complete: \(record.succeededCount ?? 0) extended, \(record.failedCount ?? 0) failed" : "in progress"
                    print(
                        "\(record.requestIdentifier.uuidString.lowercased())  \(record.productID)  \(record.days) days  \(record.environment.rawValue)  by \(record.requestedBy)  \(state)"
                    )
                }
            }
        }
    }

    struct AppAccountToken: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "app-account-token", abstract: "Sets the app account token of a purchase.")
        @OptionGroup var target: Target
        @Option(name: .customLong("original-transaction-id")) var originalTransactionID: String
        @Option(help: "The token (a UUID).") var token: String

        func run() async throws {
            try await withDesk(target, label: "support") { app, session, environment in
                try RenewalExtension.checkTransactionID(originalTransactionID, field: "original_transaction_id")
                guard let value = UUID(uuidString: token) else { throw ValidationError("--token must be a UUID") }
                let action = AuditAction.commandLine("support.app_account_token").on(app: app.id, target: "transaction \(originalTransactionID)")
                try await session.run(action) {
                    try await session.desk.setAppAccountToken(
                        appID: app.id, originalTransactionID: originalTransactionID, token: value, environment: environment)
                }
                print("Apple now has app account token \(value.uuidString.lowercased()) for \(originalTransactionID).")
            }
        }
    }

    struct TestNotification: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "test-notification", abstract: "Asks Apple for a TEST notification and prints its token (see `notifications status`).")
        @OptionGroup var target: Target

        func run() async throws {
            try await withDesk(target, label: "support") { app, session, environment in
                let action = AuditAction.commandLine("support.test_notification").on(app: app.id, target: environment.rawValue)
                let token = try await session.run(action) { try await session.desk.requestTestNotification(appID: app.id, environment: environment) }
                print(token)
            }
        }
    }
}

/// `--request-id`, or a new one.
func uuid(_ text: String?) throws -> UUID {
    guard let text else { return UUID() }
    guard let id = UUID(uuidString: text) else { throw ValidationError("--request-id must be a UUID") }
    return id
}

/// `receiptq notifications status`: what Apple says of a test notification.
struct NotificationStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "What became of a test notification: its UUID and Apple's delivery attempts.")
    @OptionGroup var target: SupportCommand.Target
    @Option(help: "The testNotificationToken.") var token: String

    func run() async throws {
        try await SupportCommand.withDesk(target, label: "notifications") { app, session, environment in
            let action = AuditAction.commandLine("support.test_notification_status").on(app: app.id, target: "token \(token.prefix(80))")
            let status = try await session.run(action) {
                try await session.desk.testNotificationStatus(appID: app.id, token: token, environment: environment)
            }
            print("Notification \(status.notificationUUID ?? "(no payload)")")
            if status.attempts.isEmpty { print("Apple has not tried to send it yet.") }
            for attempt in status.attempts { print("Apple's attempt at \(attempt.date): \(attempt.result)") }
        }
    }
}
