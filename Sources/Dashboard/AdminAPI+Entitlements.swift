import Foundation
import HTTPTypes
import Hummingbird
import ReceiptCore

/// The entitlement catalogue and grants in the admin API:
///
/// - `GET /admin/api/apps/{app_id}/entitlements`: the app's catalogue.
/// - `PUT /admin/api/apps/{app_id}/entitlements/{entitlement}` with `{"products": [...], "description"?}`
///   (role `admin`): creates or replaces one entitlement.
/// - `DELETE /admin/api/apps/{app_id}/entitlements/{entitlement}` (role `admin`).
/// - `GET /admin/api/customers/{app_id}/{user_identifier}/grants`: the user's grants.
/// - `POST /admin/api/customers/{app_id}/{user_identifier}/grants` with `{"entitlement", "expires_at"?,
///   "reason"?}` (role `operator`): 201 with the grant, and an `entitlement.granted` event.
/// - `POST /admin/api/customers/{app_id}/{user_identifier}/grants/{id}/revoke` (role `operator`).
extension AdminAPI {
    func addEntitlementRoutes<Context: AdminRequestContext>(to group: RouterGroup<Context>) {
        guard let entitlements else { return }
        group.get("apps/{app_id}/entitlements") { request, context in
            await authorized(request, context, .viewer) { _ in
                guard let appID = context.parameters.get("app_id").flatMap(UUID.init(uuidString:)) else { return notFound() }
                return await answer(context) {
                    json(.ok, .object(["entitlements": .array(try await entitlements.catalogue(appID: appID).map(AdminJSON.entitlement))]))
                }
            }
        }
        group.put("apps/{app_id}/entitlements/{entitlement}") { request, context in
            await authorized(request, context, .admin) { user in
                guard let appID = context.parameters.get("app_id").flatMap(UUID.init(uuidString:)),
                    let id = context.parameters.get("entitlement")
                else { return notFound() }
                let body: JSONValue
                switch await jsonBody(request) {
                case .success(let value): body = value
                case .failure(let refusal): return refusal.response
                }
                if let unknown = Self.unknownMember(body, allowed: ["products", "description"]) {
                    return Refusal.unprocessable(field: unknown, reason: "is not a field of an entitlement").response
                }
                guard let products = body["products"]?.arrayValue, products.allSatisfy({ $0.stringValue != nil }) else {
                    return Refusal.unprocessable(field: "products", reason: "must be an array of product ids").response
                }
                if let description = body["description"], description.stringValue == nil, description != .null {
                    return Refusal.unprocessable(field: "description", reason: "must be a string").response
                }
                let definition: EntitlementDefinition
                switch EntitlementDefinition.validate(
                    id: id, products: products.compactMap(\.stringValue), description: body["description"]?.stringValue)
                {
                case .success(let value): definition = value
                case .failure(let problem): return Refusal.unprocessable(field: problem.field, reason: problem.reason).response
                }
                return await answer(context) {
                    try await Self.entitlementAnswer {
                        try await entitlements.define(definition, appID: appID, audit: user.audit("entitlement.define", source: "api"))
                        return json(.ok, AdminJSON.entitlement(definition))
                    }
                }
            }
        }
        group.delete("apps/{app_id}/entitlements/{entitlement}") { request, context in
            await authorized(request, context, .admin) { user in
                guard let appID = context.parameters.get("app_id").flatMap(UUID.init(uuidString:)),
                    let id = context.parameters.get("entitlement")
                else { return notFound() }
                return await answer(context) {
                    do {
                        try await entitlements.remove(entitlement: id, appID: appID, audit: user.audit("entitlement.remove", source: "api"))
                    } catch EntitlementAdminError.unknownEntitlement {
                        return notFound()
                    }
                    return json(.ok, .object(["entitlement": .string(id), "removed": .bool(true)]))
                }
            }
        }
        group.get("customers/{app_id}/{user_identifier}/grants") { request, context in
            await authorized(request, context, .viewer) { _ in
                guard let (appID, user) = Self.customer(context) else { return notFound() }
                return await answer(context) {
                    let grants = try await entitlements.grants(appID: appID, userIdentifier: user)
                    return json(.ok, .object(["grants": .array(grants.map { AdminJSON.grant($0, at: now()) })]))
                }
            }
        }
        group.post("customers/{app_id}/{user_identifier}/grants") { request, context in
            await authorized(request, context, .operator) { user in
                guard let (appID, customer) = Self.customer(context) else { return notFound() }
                let body: JSONValue
                switch await jsonBody(request) {
                case .success(let value): body = value
                case .failure(let refusal): return refusal.response
                }
                let at = now()
                let request: GrantRequest
                switch GrantRequest.parse(body, now: at) {
                case .success(let value): request = value
                case .failure(let problem): return Refusal.unprocessable(field: problem.field, reason: problem.reason).response
                }
                return await answer(context) {
                    try await Self.entitlementAnswer {
                        let grant = try await entitlements.grant(
                            entitlement: request.entitlement, userIdentifier: customer, appID: appID, expiresAt: request.expiresAt,
                            reason: request.reason, audit: user.audit("entitlement.grant", source: "api"), at: at)
                        return json(.created, AdminJSON.grant(grant, at: at))
                    }
                }
            }
        }
        group.post("customers/{app_id}/{user_identifier}/grants/{id}/revoke") { request, context in
            await authorized(request, context, .operator) { user in
                guard let (appID, customer) = Self.customer(context),
                    let id = context.parameters.get("id").flatMap(UUID.init(uuidString:))
                else { return notFound() }
                let at = now()
                return await answer(context) {
                    try await Self.entitlementAnswer {
                        let grant = try await entitlements.revoke(
                            grant: id, userIdentifier: customer, appID: appID, audit: user.audit("entitlement.revoke", source: "api"), at: at)
                        return json(.ok, AdminJSON.grant(grant, at: at))
                    }
                }
            }
        }
    }

    /// The first member of `body` not in `allowed` (sorted, so the answer is stable): a typo is
    /// refused, not ignored.
    static func unknownMember(_ body: JSONValue, allowed: Set<String>) -> String? {
        body.objectValue?.keys.sorted().first { !allowed.contains($0) }
    }

    /// The app and user of a customer route (the user percent-decoded, at most 255 characters).
    static func customer<Context: AdminRequestContext>(_ context: Context) -> (UUID, String)? {
        guard let appID = context.parameters.get("app_id").flatMap(UUID.init(uuidString:)),
            let user = context.parameters.get("user_identifier")?.removingPercentEncoding, !user.isEmpty, user.unicodeScalars.count <= 255
        else { return nil }
        return (appID, user)
    }

    /// `body`'s answer, with an entitlement error as the client's: 422 for an entitlement the
    /// catalogue does not define, 404 for a grant the user does not have.
    static func entitlementAnswer(_ body: () async throws -> Response) async throws -> Response {
        do {
            return try await body()
        } catch let error as EntitlementAdminError {
            switch error {
            case .unknownEntitlement:
                throw Refusal.unprocessable(field: "entitlement", reason: "is not in the app's entitlement catalogue")
            case .grantNotFound, .unknownApp: return notFound()
            }
        }
    }
}

/// A grant as an operator asks for it.
struct GrantRequest {
    var entitlement: String
    var expiresAt: Date?
    var reason: String?

    /// The request in `body`, or the first field wrong: `expires_at` is an ISO 8601 time after
    /// `now` (at most 100 years ahead) or absent (until revoked).
    static func parse(_ body: JSONValue, now: Date) -> Result<GrantRequest, FieldProblem> {
        if let unknown = AdminAPI.unknownMember(body, allowed: ["entitlement", "expires_at", "reason"]) {
            return .failure(FieldProblem(field: unknown, reason: "is not a field of a grant"))
        }
        guard let entitlement = body["entitlement"]?.stringValue, EntitlementDefinition.isValidID(entitlement) else {
            return .failure(FieldProblem(field: "entitlement", reason: "must be an entitlement id of the app's catalogue"))
        }
        var expiresAt: Date?
        if let value = body["expires_at"], value != .null {
            guard let text = value.stringValue, let date = ISO8601DateFormatter().date(from: text) else {
                return .failure(FieldProblem(field: "expires_at", reason: "must be an ISO 8601 time such as 2027-01-31T00:00:00Z"))
            }
            guard date > now, date < now.addingTimeInterval(100 * 365 * 86_400) else {
                return .failure(FieldProblem(field: "expires_at", reason: "must be in the future, within 100 years"))
            }
            expiresAt = date
        }
        var reason: String?
        if let value = body["reason"], value != .null {
            guard let text = value.stringValue, text.count <= 500 else {
                return .failure(FieldProblem(field: "reason", reason: "must be a string of at most 500 characters"))
            }
            reason = text.isEmpty ? nil : text
        }
        return .success(GrantRequest(entitlement: entitlement, expiresAt: expiresAt, reason: reason))
    }
}
