import Foundation
import Hummingbird
import ReceiptCore

/// The identity API: who a purchase belongs to when Apple reports it alone, and user ids merged
/// into one customer.
///
/// - `PUT /client/users/{user_identifier}/app-account-token` `{"app_account_token": uuid}`: the
///   token the app set at purchase maps to this user; stored purchases without a user that carry
///   it are attached to the user in the same transaction. 200; 409 when the token maps to another
///   user.
/// - `POST /client/users/{user_identifier}/aliases` `{"alias": user id}`: the alias's customer
///   (its purchases, subscriptions, grants and tokens) merges into this user's, with a
///   `customer.aliased` event. 201, or 200 when they were one customer already; 409 for a cycle.
extension IngestAPI {
    func addIdentityRoutes(to router: Router<IngestRequestContext>, identity: any CustomerIdentity) {
        router.put("/client/users/{user_identifier}/app-account-token") { request, context in
            try await identityChange(request, context: context, fields: ["app_account_token"]) { app, user, body in
                guard case .string(let text)? = body["app_account_token"], let token = UUID(uuidString: text) else {
                    return unprocessable([FieldError(field: "app_account_token", reason: "is required (a UUID)")])
                }
                do {
                    let registration = try await identity.register(appAccountToken: token, userIdentifier: user, appID: app.id)
                    return json(
                        .ok,
                        [
                            "app_account_token": .string(registration.appAccountToken.canonical),
                            "user_identifier": .string(registration.userIdentifier),
                            "attached_purchases": .number(Double(registration.attachedPurchases)),
                        ])
                } catch CustomerIdentityError.tokenTaken {
                    return json(.conflict, ["error": .string("app_account_token is mapped to another user")])
                }
            }
        }
        router.post("/client/users/{user_identifier}/aliases") { request, context in
            try await identityChange(request, context: context, fields: ["alias"]) { app, user, body in
                let alias: String
                // A JSON string only: `stringValue` would read `false` or `7` as text.
                guard case .string(let text)? = body["alias"] else {
                    return unprocessable([FieldError(field: "alias", reason: "is required (a string)")])
                }
                switch Self.userIdentifier(text) {
                case .success(let value): alias = value
                case .failure(let error): return unprocessable([FieldError(field: "alias", reason: error.reason)])
                }
                guard alias != user else { return unprocessable([FieldError(field: "alias", reason: "must differ from the user")]) }
                do {
                    let merge = try await identity.alias(alias, userIdentifier: user, appID: app.id, at: now())
                    return json(
                        merge.created ? .created : .ok,
                        [
                            "alias": .string(merge.alias), "user_identifier": .string(merge.userIdentifier),
                            "moved_purchases": .number(Double(merge.movedPurchases)),
                        ])
                } catch CustomerIdentityError.aliasCycle {
                    return json(.conflict, ["error": .string("user_identifier is an alias of alias: merging would form a cycle")])
                }
            }
        }
    }

    /// An identity change about one user of the token's app: the token checked, the JSON body read
    /// (no member but `fields`), the user identifier checked (422 naming it); a store that cannot
    /// answer is a 503.
    private func identityChange(
        _ request: Request, context: IngestRequestContext, fields: Set<String>,
        body change: (AppRecord, String, JSONValue) async throws -> Response
    ) async throws -> Response {
        let (app, body): (AppRecord, JSONValue)
        switch try await jsonSubmission(request, context: context) {
        case .success(let found): (app, body) = found
        case .failure(let refusal): return refusal.response
        }
        guard let object = body.objectValue else { return unprocessable([FieldError(field: "body", reason: "must be a JSON object")]) }
        if let unknown = object.keys.sorted().first(where: { !fields.contains($0) }) {
            return unprocessable([FieldError(field: unknown, reason: "is not a field of this request")])
        }
        let user: String
        switch Self.userIdentifier(context.parameters.get("user_identifier")?.removingPercentEncoding) {
        case .success(let value): user = value
        case .failure(let refusal): return unprocessable([refusal])
        }
        do {
            return try await change(app, user, body)
        } catch {
            return lookupFailed(error, field: "user_identifier", logger: context.logger)
        }
    }
}
