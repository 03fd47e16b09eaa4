import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import ReceiptCore

/// The entitlement API: what a user holds right now, without the app sending a receipt again.
///
/// - `GET /client/subscriptions?user_identifier=…`: the user's subscriptions and other purchases.
/// - `GET /client/subscriptions/{original_transaction_id}[?environment=production|sandbox]`: one subscription.
extension IngestAPI {
    func addSubscriptionRoutes(to router: Router<IngestRequestContext>, catalog: any SubscriptionCatalog) {
        router.get("/client/subscriptions") { request, context in
            try await entitlements(request, context: context, catalog: catalog)
        }
        router.get("/client/subscriptions/{original_transaction_id}") { request, context in
            try await subscription(request, context: context, catalog: catalog)
        }
    }

    func entitlements(_ request: Request, context: IngestRequestContext, catalog: any SubscriptionCatalog) async throws -> Response {
        await userLookup(request, context: context, user: request.uri.queryParameters.get("user_identifier")) { app, user in
            try await catalog.entitlements(appID: app.id, userIdentifier: user).encoded(at: now(), sandboxPolicy: app.sandboxPolicy)
        }
    }

    /// A look-up about one user of the token's app (the subscriptions, app transactions and customer
    /// routes): the token checked, the user identifier checked (422 naming it), `body`'s JSON as a
    /// 200, and a store that cannot answer as the client API's look-up failure.
    func userLookup(
        _ request: Request, context: IngestRequestContext, user: String?, body: (AppRecord, String) async throws -> [UInt8]
    ) async -> Response {
        let app: AppRecord
        switch await authorize(request, context: context) {
        case .success(let found): app = found
        case .failure(let refusal): return refusal.response
        }
        let checked: String
        switch Self.userIdentifier(user) {
        case .success(let value): checked = value
        case .failure(let refusal): return unprocessable([refusal])
        }
        do {
            return jsonBytes(.ok, try await body(app, checked))
        } catch {
            return lookupFailed(error, field: "user_identifier", logger: context.logger)
        }
    }

    /// A user identifier the client API is asked about (in the query or the path): present and at
    /// most 255 characters, as receipts are stored with it; else the field's error.
    static func userIdentifier(_ value: String?) -> Result<String, FieldError> {
        guard let value, !value.isEmpty else { return .failure(FieldError(field: "user_identifier", reason: "is required")) }
        guard value.unicodeScalars.count <= 255 else {
            return .failure(FieldError(field: "user_identifier", reason: "must be at most 255 characters"))
        }
        return .success(value)
    }

    func subscription(_ request: Request, context: IngestRequestContext, catalog: any SubscriptionCatalog) async throws -> Response {
        let app: AppRecord
        switch await authorize(request, context: context) {
        case .success(let found): app = found
        case .failure(let refusal): return refusal.response
        }
        let environment = request.uri.queryParameters.get("environment")
        if let environment, environment != "production" && environment != "sandbox" {
            return unprocessable([FieldError(field: "environment", reason: "must be production or sandbox")])
        }
        guard let id = context.parameters.get("original_transaction_id"), !id.isEmpty, id.unicodeScalars.count <= 128 else { return notFound() }
        do {
            guard let found = try await catalog.subscription(appID: app.id, originalTransactionID: id, environment: environment) else {
                return notFound()
            }
            return jsonBytes(.ok, found.encoded(at: now(), sandboxPolicy: app.sandboxPolicy))
        } catch {
            return lookupFailed(error, field: nil, logger: context.logger)
        }
    }
}
