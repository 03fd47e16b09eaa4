import Foundation
import HTTPTypes
import Hummingbird
import ReceiptCore

/// The webhook endpoints and the audit log in the admin API:
///
/// - `GET /admin/api/webhooks?app_id=`: every endpoint with its state and delivery counts (never a secret).
/// - `POST /admin/api/webhooks` with `{"app_id", "url", "events"?: [...], "allow_private"?, "description"?}`:
///   201 with the endpoint's id and its signing secret, shown this once (role `admin`).
/// - `POST /admin/api/webhooks/{id}/{pause|resume|rotate-secret|remove|test}` (role `admin`).
/// - `GET /admin/api/audit?actor=&action=&user_identifier=&before=&limit=`: the audit log, newest first.
extension AdminAPI {
    /// The actions on one endpoint, by the path segment that names them.
    static let webhookActions = ["pause", "resume", "rotate-secret", "remove", "test"]

    func addWebhookRoutes<Context: AdminRequestContext>(to group: RouterGroup<Context>) {
        group.get("audit") { request, context in
            await authorized(request, context, .viewer) { _ in
                switch Self.auditQuery(request.uri.queryParameters) {
                case .failure(let problem): return Refusal.unprocessable(field: problem.field, reason: problem.reason).response
                case .success(let (filter, before, limit)):
                    guard let log = actions.log else { return json(.ok, .object(["entries": .array([])])) }
                    return await answer(context) {
                        let entries = try await log.entries(filter, before: before, limit: limit)
                        var object: [String: JSONValue] = ["entries": .array(entries.map(AdminJSON.audit))]
                        if entries.count == limit, let last = entries.last { object["next_before"] = .number(Double(last.id)) }
                        return json(.ok, .object(object))
                    }
                }
            }
        }
        guard let webhooks else { return }
        group.get("webhooks") { request, context in
            await authorized(request, context, .viewer) { _ in
                var appID: UUID?
                if let text = request.uri.queryParameters.get("app_id"), !text.isEmpty {
                    guard let id = UUID(uuidString: text) else { return Refusal.unprocessable(field: "app_id", reason: "must be a UUID").response }
                    appID = id
                }
                return await answer(context) {
                    json(.ok, .object(["endpoints": .array(try await webhooks.endpoints(appID: appID).map(AdminJSON.webhook))]))
                }
            }
        }
        group.post("webhooks") { request, context in
            await authorized(request, context, .admin) { user in
                let registration: WebhookRegistration
                switch await jsonBody(request).flatMap(WebhookRegistration.parse) {
                case .success(let value): registration = value
                case .failure(let refusal): return refusal.response
                }
                return await answer(context) {
                    try await Self.webhookAnswer {
                        let (id, secret) = try await webhooks.add(
                            appID: registration.appID, url: registration.url, eventTypes: registration.events,
                            allowPrivate: registration.allowPrivate, description: registration.description,
                            audit: user.audit("webhook.add", source: "api"))
                        return json(.created, .object(["id": .string(id.canonical), "secret": .string(secret)]))
                    }
                }
            }
        }
        group.post("webhooks/{id}/{action}") { request, context in
            await authorized(request, context, .admin) { user in
                guard let id = context.parameters.get("id").flatMap(UUID.init(uuidString:)),
                    let action = context.parameters.get("action"), Self.webhookActions.contains(action)
                else { return notFound() }
                let audit = user.audit("webhook.\(action.replacingOccurrences(of: "-", with: "_"))", source: "api")
                return await answer(context) {
                    try await Self.webhookAnswer {
                        switch action {
                        case "pause", "resume":
                            try await webhooks.setPaused(id: id, action == "pause", audit: audit)
                            return json(.ok, .object(["id": .string(id.canonical), "paused": .bool(action == "pause")]))
                        case "rotate-secret":
                            let secret = try await webhooks.rotateSecret(id: id, overlap: 24 * 3600, audit: audit)
                            return json(.ok, .object(["id": .string(id.canonical), "secret": .string(secret), "previous_valid_hours": .number(24)]))
                        case "remove":
                            try await webhooks.remove(id: id, audit: audit)
                            return json(.ok, .object(["id": .string(id.canonical), "removed": .bool(true)]))
                        default:
                            let report = try await actions.run(audit.with(target: id.canonical)) { try await webhooks.test(id: id) }
                            return json(.ok, AdminJSON.testReport(report))
                        }
                    }
                }
            }
        }
    }

    /// `body`'s answer, with a webhook administration error as the client's: 404 for an unknown
    /// endpoint, 422 for a URL or filter that cannot be an endpoint, 503 without a secrets key.
    static func webhookAnswer(_ body: () async throws -> Response) async throws -> Response {
        do {
            return try await body()
        } catch let error as WebhookAdminError {
            switch error.code {
            case .notFound: return notFound()
            case .noSecretsKey: return json(.serviceUnavailable, .object(["error": .string(error.description)]))
            case .invalidEventType: throw Refusal.unprocessable(field: "events", reason: error.description)
            case .unknownApp: throw Refusal.unprocessable(field: "app_id", reason: error.description)
            case .invalidURL, .privateAddress: throw Refusal.unprocessable(field: "url", reason: error.description)
            }
        }
    }

    /// `actor`, `action`, `user_identifier`, `before`, `limit` from the query string.
    static func auditQuery(_ query: Parameters) -> Result<(AuditFilter, Int64?, Int), FieldProblem> {
        func text(_ name: String) -> String? { query.get(name).flatMap { $0.isEmpty ? nil : $0 } }
        var before: Int64?
        if let value = text("before") {
            guard let number = Int64(value), number > 0 else { return .failure(FieldProblem(field: "before", reason: "must be an entry id")) }
            before = number
        }
        var limit = 50
        if let value = text("limit") {
            guard let number = Int(value), (1...500).contains(number) else {
                return .failure(FieldProblem(field: "limit", reason: "must be an integer in 1...500"))
            }
            limit = number
        }
        return .success((AuditFilter(actor: text("actor"), action: text("action"), userIdentifier: text("user_identifier")), before, limit))
    }
}

/// A `POST /admin/api/webhooks` body, checked.
struct WebhookRegistration: Equatable {
    var appID: UUID
    var url: String
    var events: [String]
    var allowPrivate: Bool
    var description: String?

    static let fields: Set<String> = ["app_id", "url", "events", "allow_private", "description"]

    static func parse(_ body: JSONValue) -> Result<WebhookRegistration, Refusal> {
        let object = body.objectValue ?? [:]
        if let unknown = object.keys.filter({ !fields.contains($0) }).sorted().first {
            return .failure(.unprocessable(field: InputHygiene.printableName(Array(unknown.utf8)) ?? "body", reason: "is not a field of an endpoint"))
        }
        guard let appID = object["app_id"]?.stringValue.flatMap(UUID.init(uuidString:)) else {
            return .failure(.unprocessable(field: "app_id", reason: "must be an app's id (a UUID)"))
        }
        guard let url = object["url"]?.stringValue, !url.isEmpty else { return .failure(.unprocessable(field: "url", reason: "is required")) }
        var events: [String] = []
        switch object["events"] {
        case nil, .null?: break
        case .array(let items)?:
            guard items.count <= 64, items.allSatisfy({ $0.stringValue != nil }) else {
                return .failure(.unprocessable(field: "events", reason: "must be an array of at most 64 event types"))
            }
            events = items.compactMap(\.stringValue)
        default: return .failure(.unprocessable(field: "events", reason: "must be an array of event types"))
        }
        var allowPrivate = false
        switch object["allow_private"] {
        case nil, .null?: break
        case .bool(let value)?: allowPrivate = value
        default: return .failure(.unprocessable(field: "allow_private", reason: "must be a boolean"))
        }
        var description: String?
        switch object["description"] {
        case nil, .null?: break
        case .string(let value)? where value.count <= 500: description = value
        default: return .failure(.unprocessable(field: "description", reason: "must be a string of at most 500 characters"))
        }
        return .success(WebhookRegistration(appID: appID, url: url, events: events, allowPrivate: allowPrivate, description: description))
    }
}

extension AdminJSON {
    /// An endpoint as the admin API lists it (never its secrets).
    static func webhook(_ endpoint: WebhookEndpointSummary) -> JSONValue {
        .object([
            "id": .string(endpoint.id.canonical), "app_id": .string(endpoint.appID.canonical), "app_name": .string(endpoint.appName),
            "url": .string(endpoint.url), "events": .array(endpoint.eventTypes.map(JSONValue.string)),
            "allow_private": .bool(endpoint.allowPrivate), "description": optional(endpoint.description),
            "state": .string(endpoint.pausedAt != nil ? "paused" : endpoint.failingSince != nil ? "failing" : "active"),
            "paused_at": timestamp(endpoint.pausedAt), "failing_since": timestamp(endpoint.failingSince),
            "created_at": timestamp(endpoint.createdAt), "unsettled": .number(Double(endpoint.unsettled)),
            "dead": .number(Double(endpoint.dead)),
        ])
    }

    /// One line of the audit log.
    static func audit(_ entry: AuditEntry) -> JSONValue {
        .object([
            "id": .number(Double(entry.id)), "at": timestamp(entry.at), "actor": .string(entry.actor), "role": optional(entry.role),
            "action": .string(entry.action), "source": .string(entry.source), "target": optional(entry.target),
            "app_id": optional(entry.appID?.canonical), "user_identifiers": .array(entry.userIdentifiers.map(JSONValue.string)),
            "job_count": entry.jobCount.map { .number(Double($0)) } ?? .null, "outcome": .string(entry.outcome),
            "client_address": optional(entry.clientAddress),
        ])
    }

    /// A test delivery's outcome.
    static func testReport(_ report: WebhookReport) -> JSONValue {
        .object([
            "delivered": .bool(report.isDelivered), "http_status": report.httpStatus.map { .number(Double($0)) } ?? .null,
            "error_code": optional(report.errorCode?.rawValue), "latency_ms": .number(Double(report.latencyMs)),
        ])
    }
}
