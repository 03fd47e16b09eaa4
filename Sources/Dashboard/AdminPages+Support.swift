import Foundation
import Hummingbird
import ReceiptCore

/// The support actions on the customer view: the App Store Server API's Look Up Order ID, Get
/// Refund History, Extend a Subscription Renewal Date (one, or a product's every subscriber, with
/// its status), Set App Account Token and test notifications. Forms with the session's CSRF token;
/// viewers may ask for a status, operators act; each call is audited (`support.*`) before it is
/// made. The answer is a page of its own, with the way back to the customer.
extension AdminPages {
    /// The actions, by the path segment that names them, and the role each needs.
    static let supportActions: [String: OperatorRole] = [
        "order-lookup": .operator, "refund-history": .operator, "extend": .operator, "mass-extend": .operator,
        "app-account-token": .operator, "test-notification": .operator, "mass-extension-status": .viewer,
        "test-notification-status": .viewer,
    ]

    func addSupportRoutes<Context: AdminRequestContext>(to router: Router<Context>) {
        router.post("/admin/customers/support/{action}") { request, context in
            let action = context.parameters.get("action") ?? ""
            return try await withForm(request, context: context, role: Self.supportActions[action] ?? .operator) { form, user, session in
                guard let support, Self.supportActions[action] != nil else { return Self.plain(.notFound, "no such support action") }
                return try await supportAction(action, form: form, support: support, user: user, session: session)
            }
        }
    }

    /// The stored mass extensions of `appID` for the customer view (newest first).
    func massExtensionRows(appID: UUID?) async throws -> [[String: Any]] {
        guard let support, let appID else { return [] }
        return try await support.massExtensions(appID: appID, limit: 20).map { record in
            [
                "id": record.requestIdentifier.canonical, "product": record.productID, "environment": record.environment.rawValue,
                "days": record.days, "by": record.requestedBy, "requested": Self.utc(record.requestedAt), "complete": record.isComplete,
                "progress": Self.progress(record), "appID": appID.canonical,
            ]
        }
    }

    private func supportAction(
        _ action: String, form: FormFields, support: any SupportDesk, user: Operator, session: AdminSessions.Session
    ) async throws -> Response {
        var values = base(user, session)
        values["customersCurrent"] = true
        guard let appID = form["app_id"].flatMap(UUID.init(uuidString:)) else {
            values["problem"] = "Choose an app."
            return html(.unprocessableContent, "support", values)
        }
        values["back"] = "/admin/customers?app_id=\(appID.canonical)"
        do {
            let (heading, extra) = try await run(action, appID: appID, form: form, support: support, user: user)
            values["heading"] = heading
            values.merge(extra) { $1 }
            return html(.ok, "support", values)
        } catch let problem as SupportInputError {
            values["heading"] = "Not sent to Apple"
            values["problem"] = "\(problem.field) \(problem.reason)."
            return html(.unprocessableContent, "support", values)
        } catch let failure as SupportFailure {
            values["heading"] = "Apple did not do it"
            values["problem"] = failure.description + "."
            return html(AdminAPI.supportFailure(failure, now: now()).status, "support", values)
        }
    }

    /// Runs one action: the page's heading and values.
    private func run(
        _ action: String, appID: UUID, form: FormFields, support: any SupportDesk, user: Operator
    ) async throws -> (String, [String: Any]) {
        let fields = [
            "order_id", "user_identifier", "transaction_id", "original_transaction_id", "extend_by_days", "extend_reason_code", "product_id",
            "storefront_country_codes", "app_account_token", "environment", "token", "request_identifier",
        ]
        let input = SupportInput(form: form, fields: fields)
        let environment = try input.environment()
        func audit(_ name: String, _ target: String, users: [String] = []) -> AuditAction {
            user.audit("support.\(name)", source: "dashboard", target: target, appID: appID, users: users)
        }
        switch action {
        case "order-lookup":
            let order = try input.requiredString("order_id", maxLength: 64)
            let customer = try input.string("user_identifier", maxLength: 255)
            let action = audit("order_lookup", "order \(order)", users: customer.map { [$0] } ?? [])
            let counted: @Sendable (OrderLookupResult) -> Int? = { $0.queued }
            let found = try await actions.run(action, jobCount: counted) {
                try await support.lookUpOrder(appID: appID, orderID: order, userIdentifier: customer, environment: environment)
            }
            return (
                "Order \(order)",
                [
                    "notice": "\(found.transactions.count) purchase(s); \(found.queued) queued to be validated and stored"
                        + (customer.map { " for \($0)" } ?? "") + ".",
                    "transactions": found.transactions.map(Self.transactionRow), "hasTransactions": !found.transactions.isEmpty,
                ]
            )
        case "refund-history":
            let id = try input.transactionID("transaction_id")
            let action = audit("refund_history", "transaction \(id)")
            let refunds: @Sendable (RefundHistoryResult) -> Int? = { $0.applied }
            let found = try await actions.run(action, jobCount: refunds) {
                try await support.refundHistory(appID: appID, transactionID: id, environment: environment)
            }
            return (
                "Refunds of the customer of \(id)",
                [
                    "notice": "\(found.refunded.count) refund(s) at Apple; \(found.applied) receiptq did not know, queued to be applied.",
                    "transactions": found.refunded.map(Self.transactionRow), "hasTransactions": !found.refunded.isEmpty,
                ]
            )
        case "extend":
            let request = try RenewalExtension(
                originalTransactionID: try input.transactionID("original_transaction_id"), days: try input.requiredInt("extend_by_days"),
                reason: try input.requiredInt("extend_reason_code"), requestIdentifier: try input.uuid("request_identifier") ?? UUID())
            let result = try await actions.run(audit("extend", "subscription \(request.originalTransactionID) by \(request.days) days")) {
                try await support.extendRenewal(appID: appID, request, environment: environment)
            }
            let when = result.effectiveDate.map { " It now renews on \(Self.utc($0)) UTC." } ?? ""
            return (
                "Subscription \(request.originalTransactionID)",
                result.succeeded
                    ? ["notice": "Extended by \(request.days) days.\(when)"]
                    : ["problem": "Apple did not extend it (not eligible: not active, or over 365 days this year)."]
            )
        case "mass-extend":
            let request = try MassRenewalExtension(
                productID: try input.requiredString("product_id", maxLength: 255), days: try input.requiredInt("extend_by_days"),
                reason: try input.requiredInt("extend_reason_code"), requestIdentifier: try input.uuid("request_identifier") ?? UUID(),
                storefrontCountryCodes: try input.strings("storefront_country_codes"))
            let record = try await actions.run(audit("mass_extend", "product \(request.productID) by \(request.days) days")) {
                try await support.massExtend(appID: appID, request, environment: environment, requestedBy: user.username)
            }
            return (
                "Every subscriber of \(record.productID)",
                ["notice": "Apple took request \(record.requestIdentifier.canonical); its status is on the customer view until it is complete."]
            )
        case "mass-extension-status":
            guard let id = try input.uuid("request_identifier") else {
                throw SupportInputError(field: "request_identifier", reason: "is required (a UUID)")
            }
            let found = try await actions.run(audit("mass_extension_status", "request \(id.canonical)")) {
                try await support.refreshMassExtension(appID: appID, requestIdentifier: id)
            }
            guard let record = found else { return ("Mass extension \(id.canonical)", ["problem": "No such mass extension of this app."]) }
            return ("Mass extension \(id.canonical)", ["notice": "\(record.productID): \(Self.progress(record))."])
        case "app-account-token":
            let original = try input.transactionID("original_transaction_id")
            guard let token = try input.uuid("app_account_token") else {
                throw SupportInputError(field: "app_account_token", reason: "is required (a UUID)")
            }
            try await actions.run(audit("app_account_token", "transaction \(original)")) {
                try await support.setAppAccountToken(appID: appID, originalTransactionID: original, token: token, environment: environment)
            }
            return ("Transaction \(original)", ["notice": "Apple now has app account token \(token.canonical) for it."])
        case "test-notification":
            let token = try await actions.run(audit("test_notification", environment.rawValue)) {
                try await support.requestTestNotification(appID: appID, environment: environment)
            }
            return (
                "Test notification (\(environment.rawValue))",
                ["notice": "Apple will send a TEST notification.", "testToken": token, "environment": environment.rawValue, "appID": appID.canonical]
            )
        default:
            let token = try input.requiredString("token", maxLength: 128)
            let status = try await actions.run(audit("test_notification_status", "token \(token.prefix(80))")) {
                try await support.testNotificationStatus(appID: appID, token: token, environment: environment)
            }
            return (
                "Test notification status",
                [
                    "notice": status.attempts.isEmpty
                        ? "Apple has not tried to send it yet."
                        : "Apple tried \(status.attempts.count) time(s); the last: \(status.attempts.last?.result ?? "").",
                    "attempts": status.attempts.map { ["date": Self.utc($0.date), "result": $0.result] }, "hasAttempts": !status.attempts.isEmpty,
                    "uuid": status.notificationUUID ?? "",
                ]
            )
        }
    }

    private static func transactionRow(_ transaction: SupportTransaction) -> [String: Any] {
        [
            "transaction": transaction.transactionID, "original": transaction.originalTransactionID, "product": transaction.productID,
            "purchased": transaction.purchaseDate.map { utc($0) } ?? "—", "expires": transaction.expiresDate.map { utc($0) } ?? "—",
            "refunded": transaction.revocationDate.map { utc($0) } ?? "",
        ]
    }

    static func progress(_ record: MassExtensionRecord) -> String {
        guard record.isComplete else { return record.checkedAt == nil ? "requested, not checked yet" : "in progress at Apple" }
        return "complete: \(record.succeededCount ?? 0) extended, \(record.failedCount ?? 0) failed"
    }
}
