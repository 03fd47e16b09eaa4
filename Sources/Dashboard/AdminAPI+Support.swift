import Foundation
import HTTPTypes
import Hummingbird
import ReceiptCore

/// The App Store Server API's support endpoints in the admin API, per app (viewers look, operators
/// act; every call to Apple is audited as `support.*` before it is made):
///
/// - `POST /admin/api/apps/{app_id}/orders/lookup` `{"order_id", "user_identifier"?, "environment"?}`:
///   Look Up Order ID; the purchases found are queued as validation jobs for that user.
/// - `POST /admin/api/apps/{app_id}/refunds/lookup` `{"transaction_id", "environment"?}`: Get Refund
///   History; refunds receiptq did not know are queued to be applied.
/// - `POST /admin/api/apps/{app_id}/subscriptions/extend` `{"original_transaction_id", "extend_by_days",
///   "extend_reason_code", "request_identifier"?, "environment"?}`: Extend a Subscription Renewal Date.
/// - `POST /admin/api/apps/{app_id}/mass-extensions` `{"product_id", "extend_by_days", "extend_reason_code",
///   "storefront_country_codes"?, "request_identifier"?, "environment"?}`, `GET …/mass-extensions`,
///   `GET …/mass-extensions/{request_identifier}` (asks Apple, until complete).
/// - `POST /admin/api/apps/{app_id}/app-account-token` `{"original_transaction_id", "app_account_token", "environment"?}`.
/// - `POST /admin/api/apps/{app_id}/test-notifications` `{"environment"?}`,
///   `GET …/test-notifications/{token}?environment=`.
///
/// Bad input is a 422 naming the field; Apple's answers become clear errors (an order id Apple does
/// not know is a 404 with its reason, Apple's limit a 429 with `Retry-After`), never a 5xx for the
/// operator's mistake.
extension AdminAPI {
    func addSupportRoutes<Context: AdminRequestContext>(to group: RouterGroup<Context>) {
        guard let support else { return }
        group.post("apps/{app_id}/orders/lookup") { request, context in
            await supportAction(request, context, role: .operator) { appID, body, user in
                let input = try SupportInput(body, fields: ["order_id", "user_identifier", "environment"])
                let order = try input.requiredString("order_id", maxLength: 64)
                let userIdentifier = try input.string("user_identifier", maxLength: 255)
                let environment = try input.environment()
                let action = user.audit(
                    "support.order_lookup", source: "api", target: "order \(order)", appID: appID, users: userIdentifier.map { [$0] } ?? [])
                let counted: @Sendable (OrderLookupResult) -> Int? = { $0.queued }
                let found = try await actions.run(action, jobCount: counted) {
                    try await support.lookUpOrder(appID: appID, orderID: order, userIdentifier: userIdentifier, environment: environment)
                }
                return json(
                    .ok,
                    .object(["transactions": .array(found.transactions.map(AdminJSON.supportTransaction)), "queued": .number(Double(found.queued))]))
            }
        }
        group.post("apps/{app_id}/refunds/lookup") { request, context in
            await supportAction(request, context, role: .operator) { appID, body, user in
                let input = try SupportInput(body, fields: ["transaction_id", "environment"])
                let id = try input.transactionID("transaction_id")
                let environment = try input.environment()
                let action = user.audit("support.refund_history", source: "api", target: "transaction \(id)", appID: appID)
                let counted: @Sendable (RefundHistoryResult) -> Int? = { $0.applied }
                let found = try await actions.run(action, jobCount: counted) {
                    try await support.refundHistory(appID: appID, transactionID: id, environment: environment)
                }
                return json(
                    .ok, .object(["refunded": .array(found.refunded.map(AdminJSON.supportTransaction)), "applied": .number(Double(found.applied))]))
            }
        }
        group.post("apps/{app_id}/subscriptions/extend") { request, context in
            await supportAction(request, context, role: .operator) { appID, body, user in
                let input = try SupportInput(
                    body, fields: ["original_transaction_id", "extend_by_days", "extend_reason_code", "request_identifier", "environment"])
                let extension_ = try RenewalExtension(
                    originalTransactionID: try input.transactionID("original_transaction_id"), days: try input.requiredInt("extend_by_days"),
                    reason: try input.requiredInt("extend_reason_code"), requestIdentifier: try input.uuid("request_identifier") ?? UUID())
                let environment = try input.environment()
                let action = user.audit(
                    "support.extend", source: "api",
                    target: "subscription \(extension_.originalTransactionID) by \(extension_.days) days (reason \(extension_.reason.rawValue))",
                    appID: appID)
                let result = try await actions.run(action) { try await support.extendRenewal(appID: appID, extension_, environment: environment) }
                return json(
                    .ok,
                    .object([
                        "original_transaction_id": .string(result.originalTransactionID), "success": .bool(result.succeeded),
                        "effective_date": AdminJSON.timestamp(result.effectiveDate),
                        "web_order_line_item_id": AdminJSON.optional(result.webOrderLineItemID),
                        "request_identifier": .string(extension_.requestIdentifier.canonical), "refresh_queued": .bool(result.refreshQueued),
                    ]))
            }
        }
        group.post("apps/{app_id}/mass-extensions") { request, context in
            await supportAction(request, context, role: .operator) { appID, body, user in
                let input = try SupportInput(
                    body,
                    fields: ["product_id", "extend_by_days", "extend_reason_code", "storefront_country_codes", "request_identifier", "environment"])
                let mass = try MassRenewalExtension(
                    productID: try input.requiredString("product_id", maxLength: 255), days: try input.requiredInt("extend_by_days"),
                    reason: try input.requiredInt("extend_reason_code"), requestIdentifier: try input.uuid("request_identifier") ?? UUID(),
                    storefrontCountryCodes: try input.strings("storefront_country_codes"))
                let environment = try input.environment()
                let action = user.audit(
                    "support.mass_extend", source: "api", target: "product \(mass.productID) by \(mass.days) days (reason \(mass.reason.rawValue))",
                    appID: appID)
                let record = try await actions.run(action) {
                    try await support.massExtend(appID: appID, mass, environment: environment, requestedBy: user.username)
                }
                return json(.accepted, AdminJSON.massExtension(record))
            }
        }
        group.get("apps/{app_id}/mass-extensions") { request, context in
            await authorized(request, context, .viewer) { _ in
                guard let appID = context.parameters.get("app_id").flatMap(UUID.init(uuidString:)) else { return notFound() }
                return await answer(context) {
                    json(
                        .ok,
                        .object(["mass_extensions": .array(try await support.massExtensions(appID: appID, limit: 50).map(AdminJSON.massExtension))]))
                }
            }
        }
        group.get("apps/{app_id}/mass-extensions/{request_identifier}") { request, context in
            await authorized(request, context, .viewer) { user in
                guard let appID = context.parameters.get("app_id").flatMap(UUID.init(uuidString:)),
                    let id = context.parameters.get("request_identifier").flatMap(UUID.init(uuidString:))
                else { return notFound() }
                return await supportAnswer(context) {
                    let action = user.audit("support.mass_extension_status", source: "api", target: "request \(id.canonical)", appID: appID)
                    let found = try await actions.run(action) { try await support.refreshMassExtension(appID: appID, requestIdentifier: id) }
                    guard let record = found else { return notFound() }
                    return json(.ok, AdminJSON.massExtension(record))
                }
            }
        }
        group.post("apps/{app_id}/app-account-token") { request, context in
            await supportAction(request, context, role: .operator) { appID, body, user in
                let input = try SupportInput(body, fields: ["original_transaction_id", "app_account_token", "environment"])
                let original = try input.transactionID("original_transaction_id")
                guard let token = try input.uuid("app_account_token") else {
                    throw SupportInputError(field: "app_account_token", reason: "is required (a UUID)")
                }
                let environment = try input.environment()
                let action = user.audit("support.app_account_token", source: "api", target: "transaction \(original)", appID: appID)
                try await actions.run(action) {
                    try await support.setAppAccountToken(appID: appID, originalTransactionID: original, token: token, environment: environment)
                }
                return json(
                    .ok,
                    .object(["original_transaction_id": .string(original), "app_account_token": .string(token.canonical), "set": .bool(true)]))
            }
        }
        group.post("apps/{app_id}/test-notifications") { request, context in
            await supportAction(request, context, role: .operator) { appID, body, user in
                let input = try SupportInput(body, fields: ["environment"])
                let environment = try input.environment()
                let action = user.audit("support.test_notification", source: "api", target: environment.rawValue, appID: appID)
                let token = try await actions.run(action) { try await support.requestTestNotification(appID: appID, environment: environment) }
                return json(.ok, .object(["test_notification_token": .string(token), "environment": .string(environment.rawValue)]))
            }
        }
        group.get("apps/{app_id}/test-notifications/{token}") { request, context in
            await authorized(request, context, .viewer) { user in
                guard let appID = context.parameters.get("app_id").flatMap(UUID.init(uuidString:)), let token = context.parameters.get("token") else {
                    return notFound()
                }
                return await supportAnswer(context) {
                    let name = request.uri.queryParameters.get("environment") ?? ""
                    let environment = try SupportInput([:], fields: []).environment(name.isEmpty ? nil : name)
                    let action = user.audit("support.test_notification_status", source: "api", target: "token \(token.prefix(80))", appID: appID)
                    let status = try await actions.run(action) {
                        try await support.testNotificationStatus(appID: appID, token: token, environment: environment)
                    }
                    return json(.ok, AdminJSON.testNotificationStatus(status))
                }
            }
        }
    }

    /// An operator's support action: the role, the app id of the path, the JSON body; then `body`,
    /// its failures mapped to the answers the admin API documents.
    private func supportAction<Context: AdminRequestContext>(
        _ request: Request, _ context: Context, role: OperatorRole,
        _ body: @escaping (UUID, [String: JSONValue], Operator) async throws -> Response
    ) async -> Response {
        await authorized(request, context, role) { user in
            guard let appID = context.parameters.get("app_id").flatMap(UUID.init(uuidString:)) else { return notFound() }
            let object: [String: JSONValue]
            switch await jsonBody(request) {
            case .success(let value): object = value.objectValue ?? [:]
            case .failure(let refusal): return refusal.response
            }
            return await supportAnswer(context) { try await body(appID, object, user) }
        }
    }

    /// `body`'s answer, with the support desk's errors as the operator's answers.
    func supportAnswer<Context: AdminRequestContext>(_ context: Context, _ body: () async throws -> Response) async -> Response {
        await answer(context) {
            do {
                return try await body()
            } catch let problem as SupportInputError {
                throw Refusal.unprocessable(field: problem.field, reason: problem.reason)
            } catch let failure as SupportFailure {
                return Self.supportFailure(failure, now: now())
            }
        }
    }

    /// The answer for each way a support call can fail: 4xx for what the operator can change or
    /// wait out; 502/503 only for Apple's or receiptq's own trouble.
    static func supportFailure(_ failure: SupportFailure, now: Date) -> Response {
        let status: HTTPResponse.Status =
            switch failure {
            case .unknownApp, .orderNotFound, .transactionNotFound, .testNotificationNotFound: .notFound
            case .noServerAPIKey, .unauthorized: .conflict
            case .refusedByApple: .unprocessableContent
            case .rateLimited: .tooManyRequests
            case .appleUnavailable, .queueUnavailable: .serviceUnavailable
            case .malformedAnswer: .badGateway
            }
        var object: [String: JSONValue] = ["error": .string(failure.code), "reason": .string(failure.description)]
        if case .refusedByApple(let code) = failure { object["apple_error_code"] = .number(Double(code)) }
        var response = json(status, .object(object))
        switch failure {
        case .rateLimited(let until): response.headers[.retryAfter] = String(max(1, Int(until.timeIntervalSince(now).rounded(.up))))
        case .appleUnavailable, .queueUnavailable: response.headers[.retryAfter] = "5"
        default: break
        }
        return response
    }
}

/// A support request's fields, from a JSON body or a dashboard form: each read with its type
/// checked, unknown fields refused (a misspelt `extendByDays` must not be silently ignored).
struct SupportInput {
    let fields: [String: JSONValue]
    /// A form's numbers are text; a JSON body's must be numbers.
    let numbersAsText: Bool

    init(_ fields: [String: JSONValue], fields allowed: Set<String>) throws(SupportInputError) {
        if let unknown = fields.keys.filter({ !allowed.contains($0) }).sorted().first {
            throw SupportInputError(field: InputHygiene.printableName(Array(unknown.utf8)) ?? "body", reason: "is not a field of this request")
        }
        self.fields = fields
        numbersAsText = false
    }

    /// A form's fields (empty values are absent), as strings.
    init(form: FormFields, fields allowed: [String]) {
        var values: [String: JSONValue] = [:]
        for name in allowed { if let value = form[name]?.trimmingCharacters(in: .whitespaces), !value.isEmpty { values[name] = .string(value) } }
        fields = values
        numbersAsText = true
    }

    func string(_ name: String, maxLength: Int) throws(SupportInputError) -> String? {
        switch fields[name] {
        case nil, .null?: return nil
        case .string(let value)? where !value.isEmpty && value.count <= maxLength && !value.unicodeScalars.contains(where: { $0.value == 0 }):
            return value
        default: throw SupportInputError(field: name, reason: "must be a non-empty string of at most \(maxLength) characters")
        }
    }

    func requiredString(_ name: String, maxLength: Int) throws(SupportInputError) -> String {
        guard let value = try string(name, maxLength: maxLength) else { throw SupportInputError(field: name, reason: "is required") }
        return value
    }

    func transactionID(_ name: String) throws(SupportInputError) -> String {
        let value = try requiredString(name, maxLength: 64)
        try RenewalExtension.checkTransactionID(value, field: name)
        return value
    }

    func requiredInt(_ name: String) throws(SupportInputError) -> Int {
        guard let value = fields[name] else { throw SupportInputError(field: name, reason: "is required (an integer)") }
        let number: Int? =
            switch value {
            case .number: value.intValue
            case .string(let text) where numbersAsText: Int(text)
            default: nil
            }
        guard let number else { throw SupportInputError(field: name, reason: "must be an integer") }
        return number
    }

    func uuid(_ name: String) throws(SupportInputError) -> UUID? {
        guard let text = try string(name, maxLength: 36) else { return nil }
        guard let id = UUID(uuidString: text) else { throw SupportInputError(field: name, reason: "must be a UUID") }
        return id
    }

    func strings(_ name: String) throws(SupportInputError) -> [String] {
        switch fields[name] {
        case nil, .null?: return []
        case .array(let items)? where items.allSatisfy({ $0.stringValue != nil && $0.intValue == nil }): return items.compactMap(\.stringValue)
        // A form sends them comma-separated.
        case .string(let text)?: return text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        default: throw SupportInputError(field: name, reason: "must be an array of ISO 3166-1 alpha-3 codes")
        }
    }

    /// `production` (the default) or `sandbox`.
    func environment(_ given: String? = nil) throws(SupportInputError) -> AppStoreEnvironment {
        var name = given
        if name == nil { name = try string("environment", maxLength: 16) }
        guard let name else { return .production }
        guard let environment = AppStoreEnvironment(rawValue: name) else {
            throw SupportInputError(field: "environment", reason: "must be production or sandbox")
        }
        return environment
    }
}

extension AdminJSON {
    /// A transaction Apple returned to a support look-up (never its JWS).
    static func supportTransaction(_ transaction: SupportTransaction) -> JSONValue {
        .object([
            "transaction_id": .string(transaction.transactionID), "original_transaction_id": .string(transaction.originalTransactionID),
            "product_id": .string(transaction.productID), "purchase_date": timestamp(transaction.purchaseDate),
            "expires_date": timestamp(transaction.expiresDate), "revocation_date": timestamp(transaction.revocationDate),
        ])
    }

    /// A mass extension as stored, with Apple's last word on it.
    static func massExtension(_ record: MassExtensionRecord) -> JSONValue {
        .object([
            "request_identifier": .string(record.requestIdentifier.canonical), "product_id": .string(record.productID),
            "environment": .string(record.environment.rawValue), "extend_by_days": .number(Double(record.days)),
            "extend_reason_code": .number(Double(record.reason.rawValue)),
            "storefront_country_codes": .array(record.storefrontCountryCodes.map(JSONValue.string)), "requested_by": .string(record.requestedBy),
            "requested_at": timestamp(record.requestedAt), "complete": .bool(record.isComplete), "completed_at": timestamp(record.completedAt),
            "succeeded_count": record.succeededCount.map { .number(Double($0)) } ?? .null,
            "failed_count": record.failedCount.map { .number(Double($0)) } ?? .null, "checked_at": timestamp(record.checkedAt),
        ])
    }

    /// What Apple says of a test notification.
    static func testNotificationStatus(_ status: TestNotificationStatus) -> JSONValue {
        .object([
            "notification_uuid": optional(status.notificationUUID),
            "attempts": .array(status.attempts.map { .object(["date": timestamp($0.date), "result": .string($0.result)]) }),
        ])
    }
}
