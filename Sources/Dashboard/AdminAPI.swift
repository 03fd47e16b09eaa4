import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import ReceiptCore

/// The admin JSON API under `/admin/api`, for operators' tools and `receiptq dlq`:
///
/// - `GET /admin/api/overview`: queue depths, retries, dead letters, live workers.
/// - `GET /admin/api/{dead|retries}?error_code=&app_id=&q=&offset=&limit=`: a page, newest dead
///   letter (or soonest retry) first.
/// - `GET /admin/api/{dead|retries}/{id}`: one entry, its envelope (receipt not shown) and every
///   call to Apple.
/// - `POST /admin/api/{dead|retries}/retry` and `…/delete` with `{"ids": […]}` or
///   `{"all": true, "error_code"?, "app_id"?, "q"?}` (role `operator`).
/// - `GET|POST /admin/api/webhooks`, `POST /admin/api/webhooks/{id}/{pause|resume|rotate-secret|remove|test}`
///   (changes: role `admin`), `GET /admin/api/audit` (see `AdminAPI+Webhooks.swift`).
/// - `/admin/api/apps/{app_id}/…`: the App Store Server API's support endpoints (see `AdminAPI+Support.swift`).
/// - `POST /admin/api/history/resync` (role `operator`, see `AdminAPI+Resync.swift`).
/// - `GET /admin/api/apps/{app_id}/metrics?from&to`: revenue figures (see `AdminAPI+Revenue.swift`).
///
/// Every request needs an operator's credentials (HTTP Basic): a refusal is a bare 401, a role
/// too low for the action a 403 naming the role it needs. Every action is written to the audit
/// log before it runs (no line, no action). POSTs must be `application/json`: a form on another
/// site cannot send that without a CORS preflight, which this API never grants (its CSRF
/// defence). Responses are never cached.
public struct AdminAPI: Sendable {
    let dead: any JobSetStore
    let retries: any JobSetStore
    let overview: any QueueOverview
    let authenticator: OperatorAuthenticator
    let actions: AuditedActions
    let webhooks: (any WebhookAdministration)?
    /// The App Store Server API's support endpoints (nil: no support routes).
    let support: (any SupportDesk)?
    /// Queues history resyncs (nil: no resync route).
    let resync: (any HistoryResync)?
    let entitlements: (any EntitlementAdministration)?
    /// The apps' transfer rules (nil: no transfer-rule routes).
    let transferRules: (any TransferRuleAdministration)?
    let consumptionPolicies: (any ConsumptionPolicies)?
    /// A customer's data for access requests (nil: no export route).
    let customerData: (any CustomerDataExport)?
    /// Erases a customer (nil: no erasure route).
    let eraser: CustomerEraser?
    /// The apps' revenue figures (nil: no metrics route).
    let revenue: (any RevenueFigures)?
    let now: @Sendable () -> Date

    /// The most entries one page may hold.
    static let maxPageSize = 500
    static let maxBodyBytes = 1 << 20

    /// Creates the API.
    /// - Parameters:
    ///   - dead: the dead letters.
    ///   - retries: the jobs waiting in backoff.
    ///   - overview: queue depths and workers.
    ///   - authenticator: who may use it, with which role.
    ///   - audit: the audit log (nil only where there is no Postgres: actions then go unrecorded).
    ///   - webhooks: the webhook endpoints' administration (nil: no webhook routes).
    ///   - support: the support endpoints (nil: no support routes; see `AdminAPI+Support.swift`).
    ///   - resync: queues history resyncs (nil: no resync route).
    ///   - transferRules: the apps' transfer rules (nil: no transfer-rule routes).
    ///   - consumptionPolicies: the apps' refund-defence policies (nil: no consumption-policy routes).
    ///   - customerData: a customer's data, exported (nil: no export route).
    ///   - eraser: erases a customer (nil: no erasure route).
    ///   - revenue: the apps' revenue figures (nil: no metrics route; see `AdminAPI+Revenue.swift`).
    ///   - now: the injected clock (ages).
    public init(
        dead: any JobSetStore, retries: any JobSetStore, overview: any QueueOverview, authenticator: OperatorAuthenticator,
        audit: (any AuditLog)? = nil, webhooks: (any WebhookAdministration)? = nil, support: (any SupportDesk)? = nil,
        resync: (any HistoryResync)? = nil, entitlements: (any EntitlementAdministration)? = nil,
        transferRules: (any TransferRuleAdministration)? = nil, consumptionPolicies: (any ConsumptionPolicies)? = nil,
        customerData: (any CustomerDataExport)? = nil, eraser: CustomerEraser? = nil, revenue: (any RevenueFigures)? = nil,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.support = support
        self.resync = resync
        self.dead = dead
        self.retries = retries
        self.overview = overview
        self.authenticator = authenticator
        actions = AuditedActions(log: audit)
        self.webhooks = webhooks
        self.entitlements = entitlements
        self.transferRules = transferRules
        self.consumptionPolicies = consumptionPolicies
        self.customerData = customerData
        self.eraser = eraser
        self.revenue = revenue
        self.now = now
    }

    /// Adds the routes to `router`.
    public func addRoutes<Context: AdminRequestContext>(to router: Router<Context>) {
        let group = router.group("/admin/api").add(middleware: AdminHeadersMiddleware())
        group.get("overview") { request, context in
            await authorized(request, context, .viewer) { _ in
                await answer(context) { json(.ok, AdminJSON.overview(try await overview.snapshot())) }
            }
        }
        addWebhookRoutes(to: group)
        addSupportRoutes(to: group)
        addResyncRoutes(to: group)
        addEntitlementRoutes(to: group)
        addTransferRuleRoutes(to: group)
        addRevenueRoutes(to: group)
        addConsumptionPolicyRoutes(to: group)
        addCustomerDataRoutes(to: group)
        group.get("{set}") { request, context in
            await authorized(request, context, .viewer) { _ in
                guard let (store, kind) = set(context) else { return notFound() }
                switch Self.filter(request.uri.queryParameters) {
                case .failure(let problem): return Refusal.unprocessable(field: problem.field, reason: problem.reason).response
                case .success(let (filter, offset, limit)):
                    return await answer(context) {
                        json(.ok, AdminJSON.page(try await store.list(filter: filter, offset: offset, limit: limit), kind: kind, now: now()))
                    }
                }
            }
        }
        group.get("{set}/{id}") { request, context in
            await authorized(request, context, .viewer) { _ in
                guard let (store, kind) = set(context), let id = context.parameters.get("id").flatMap(JobSetEntry.ID.init) else {
                    return notFound()
                }
                return await answer(context) {
                    guard let entry = try await store.entry(id: id) else { return notFound() }
                    return json(.ok, AdminJSON.detail(entry, kind: kind, now: now()))
                }
            }
        }
        for action in ["retry", "delete"] {
            group.post("{set}/\(action)") { request, context in
                await authorized(request, context, .operator) { user in
                    guard let (store, _) = set(context) else { return notFound() }
                    return await mutate(request, context: context, store: store, retry: action == "retry", user: user)
                }
            }
        }
    }

    /// `body`'s answer for an operator holding at least `role`; else a bare 401 (no or wrong
    /// credentials), 403 (a lesser role), 429 (too many failed logins) or 503 (accounts unreadable).
    func authorized<Context: AdminRequestContext>(
        _ request: Request, _ context: Context, _ role: OperatorRole, _ body: (Operator) async -> Response
    ) async -> Response {
        let address = authenticator.address(request, context)
        switch await authenticator.authenticate(authorization: request.headers[.authorization], door: .adminAPI, address: address, now: now()) {
        case .granted(let user):
            guard user.role >= role else {
                await authenticator.forbidden(user, door: .adminAPI, now: now())
                await actions.denied(user, "\(request.method.rawValue) \(request.uri.path)", source: "api", logger: context.logger)
                return json(.forbidden, .object(["error": .string("forbidden"), "reason": .string("needs the \(role.rawValue) role")]))
            }
            return await body(user)
        case .refused:
            var response = json(.unauthorized, .object(["error": .string("unauthorized")]))
            response.headers[.wwwAuthenticate] = #"Basic realm="receiptq admin", charset="UTF-8""#
            return response
        case .throttled(let wait):
            var response = json(.tooManyRequests, .object(["error": .string("too many failed logins")]))
            response.headers[.retryAfter] = String(wait)
            return response
        case .unavailable:
            return Refusal.unavailable.response
        }
    }

    private func set<Context: AdminRequestContext>(_ context: Context) -> (any JobSetStore, JobSetKind)? {
        switch context.parameters.get("set") {
        case "dead": (dead, .dead)
        case "retries": (retries, .retry)
        default: nil
        }
    }

    /// `body`'s answer, or 503 when Redis, Postgres or the audit log cannot be reached: the
    /// operator's request was fine.
    func answer<Context: AdminRequestContext>(_ context: Context, _ body: () async throws -> Response) async -> Response {
        do {
            return try await body()
        } catch let refusal as Refusal {
            return refusal.response
        } catch {
            context.logger.error("Admin API: a store is unreachable", error: error)
            return Refusal.unavailable.response
        }
    }

    /// The query parameters each route of the admin API takes (for the API's input gate).
    public static let queryParameters: [String: Set<String>] = [
        "GET /admin/api/overview": [], "GET /admin/api/{set}": ["error_code", "app_id", "q", "offset", "limit"],
        "GET /admin/api/{set}/{id}": [], "POST /admin/api/{set}/retry": [], "POST /admin/api/{set}/delete": [],
        "GET /admin/api/webhooks": ["app_id"], "POST /admin/api/webhooks": [], "POST /admin/api/webhooks/{id}/{action}": [],
        "GET /admin/api/audit": ["actor", "action", "user_identifier", "before", "limit"],
        "POST /admin/api/apps/{app_id}/orders/lookup": [], "POST /admin/api/apps/{app_id}/refunds/lookup": [],
        "POST /admin/api/apps/{app_id}/subscriptions/extend": [], "POST /admin/api/apps/{app_id}/mass-extensions": [],
        "GET /admin/api/apps/{app_id}/mass-extensions": [], "GET /admin/api/apps/{app_id}/mass-extensions/{request_identifier}": [],
        "POST /admin/api/apps/{app_id}/app-account-token": [], "POST /admin/api/apps/{app_id}/test-notifications": [],
        "GET /admin/api/apps/{app_id}/test-notifications/{token}": ["environment"],
        "POST /admin/api/history/resync": [],
        "GET /admin/api/apps/{app_id}/consumption-policy": [], "PUT /admin/api/apps/{app_id}/consumption-policy": [],
        "DELETE /admin/api/customers/{app_id}/{user_identifier}": [],
        "GET /admin/api/apps/{app_id}/metrics": ["from", "to"],
    ]

    /// `error_code`, `app_id`, `q`, `offset`, `limit` from the query string (the pages' too).
    static func filter(_ query: Parameters) -> Result<(JobSetFilter, Int, Int), FieldProblem> {
        var errors: [(String, String)] = []
        var appID: UUID?
        if let text = query.get("app_id"), !text.isEmpty {
            appID = UUID(uuidString: text)
            if appID == nil { errors.append(("app_id", "must be an app's id (a UUID)")) }
        }
        func integer(_ name: String, _ fallback: Int, _ range: ClosedRange<Int>) -> Int {
            guard let text = query.get(name), !text.isEmpty else { return fallback }
            guard let value = Int(text), range.contains(value) else {
                errors.append((name, "must be an integer in \(range.lowerBound)...\(range.upperBound)"))
                return fallback
            }
            return value
        }
        let offset = integer("offset", 0, 0...10_000_000)
        let limit = integer("limit", 50, 1...maxPageSize)
        if let first = errors.first { return .failure(FieldProblem(field: first.0, reason: first.1)) }
        let filter = JobSetFilter(errorCode: FailureCode(text: query.get("error_code")), appID: appID, search: query.get("q"))
        return .success((filter, offset, limit))
    }

    /// The request's JSON object body, or the answer refusing it (415, 413, 422).
    /// The app and the value of a one-setting body (`PUT /admin/api/apps/{app_id}/…` with
    /// `{"<field>": "<one of Value's cases>"}`), or the refusal: 404 for an app id that is not a
    /// UUID, 415/413/422 for the body, 422 naming an unknown member or the field.
    func appSetting<Context: AdminRequestContext, Value: RawRepresentable & CaseIterable>(
        _ request: Request, _ context: Context, field: String, of setting: String, as type: Value.Type
    ) async -> Result<(UUID, Value), Refusal> where Value.RawValue == String {
        guard let appID = context.parameters.get("app_id").flatMap(UUID.init(uuidString:)) else {
            return .failure(Refusal(response: notFound()))
        }
        let body: JSONValue
        switch await jsonBody(request) {
        case .success(let value): body = value
        case .failure(let refusal): return .failure(refusal)
        }
        if let unknown = Self.unknownMember(body, allowed: [field]) {
            return .failure(.unprocessable(field: unknown, reason: "is not a field of \(setting)"))
        }
        guard let value = body[field]?.stringValue.flatMap(Value.init(rawValue:)) else {
            let names = Value.allCases.map(\.rawValue)
            return .failure(.unprocessable(field: field, reason: "must be \(names.dropLast().joined(separator: ", ")) or \(names.last ?? "")"))
        }
        return .success((appID, value))
    }

    func jsonBody(_ request: Request) async -> Result<JSONValue, Refusal> {
        guard request.headers[.contentType]?.lowercased().hasPrefix("application/json") == true else {
            return .failure(Refusal(response: json(.unsupportedMediaType, .object(["error": .string("Content-Type must be application/json")]))))
        }
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: Self.maxBodyBytes)
        } catch is NIOTooManyBytesError {
            return .failure(Refusal(response: json(.contentTooLarge, .object(["error": .string("body larger than \(Self.maxBodyBytes) bytes")]))))
        } catch {
            return .failure(.unprocessable(field: "body", reason: "could not be read"))
        }
        guard let parsed = try? JSONDecoder().decode(JSONValue.self, from: Data(body.readableBytesView)), parsed.objectValue != nil else {
            return .failure(.unprocessable(field: "body", reason: "must be a JSON object"))
        }
        return .success(parsed)
    }

    private func mutate<Context: AdminRequestContext>(
        _ request: Request, context: Context, store: any JobSetStore, retry: Bool, user: Operator
    ) async -> Response {
        let selection: Selection
        switch await jsonBody(request).flatMap(Selection.parse) {
        case .success(let value): selection = value
        case .failure(let refusal): return refusal.response
        }
        return await answer(context) {
            let moved = try await actions.apply(selection, to: store, retry: retry, by: user, source: "api", logger: context.logger)
            return json(.ok, .object([retry ? "retried" : "deleted": .number(Double(moved))]))
        }
    }
}

/// Which entries a POST acts on.
enum Selection: Equatable {
    case ids([JobSetEntry.ID])
    case all(JobSetFilter)

    /// Retries or deletes the selected entries of `store`, and logs the action (never the ids).
    /// - Returns: how many entries moved.
    func apply(to store: any JobSetStore, retry: Bool, logger: Logger) async throws -> Int {
        let moved: Int
        switch (self, retry) {
        case (.ids(let ids), true): moved = try await store.retry(ids: ids)
        case (.ids(let ids), false): moved = try await store.delete(ids: ids)
        case (.all(let filter), true): moved = try await store.retryAll(matching: filter)
        case (.all(let filter), false): moved = try await store.deleteAll(matching: filter)
        }
        logger.info(
            "Admin action",
            metadata: ["admin.action": "\(retry ? "retry" : "delete")", "admin.set": "\(store.kind.rawValue)", "jobs.count": "\(moved)"])
        return moved
    }

    /// The fields a selection may have; anything else is refused rather than silently ignored, so
    /// a misspelt filter (`errorCode`) cannot widen "retry all" to every entry.
    static let fields: Set<String> = ["ids", "all", "error_code", "app_id", "q"]

    static func parse(_ body: JSONValue) -> Result<Selection, Refusal> {
        let object = body.objectValue ?? [:]
        if let unknown = object.keys.filter({ !fields.contains($0) }).sorted().first {
            return .failure(.unprocessable(field: InputHygiene.printableName(Array(unknown.utf8)) ?? "body", reason: "is not a field of a selection"))
        }
        for name in ["error_code", "app_id", "q"] {
            switch object[name] {
            case nil, .null?, .string?: continue
            default: return .failure(.unprocessable(field: name, reason: "must be a string"))
            }
        }
        switch object["all"] {
        case nil, .null?, .bool?: break
        default: return .failure(.unprocessable(field: "all", reason: "must be a boolean"))
        }
        // Checked even beside `ids`, which it does not narrow: a wrong value is a mistake either way.
        var appID: UUID?
        if let text = body["app_id"]?.stringValue, !text.isEmpty {
            guard let id = UUID(uuidString: text) else { return .failure(.unprocessable(field: "app_id", reason: "must be a UUID")) }
            appID = id
        }
        if let ids = body["ids"] {
            guard let list = ids.arrayValue, !list.isEmpty, list.count <= 10_000 else {
                return .failure(.unprocessable(field: "ids", reason: "must be a non-empty array of at most 10000 ids"))
            }
            var parsed: [JobSetEntry.ID] = []
            for item in list {
                guard let id = item.stringValue.flatMap(JobSetEntry.ID.init) else {
                    return .failure(.unprocessable(field: "ids", reason: "each must be a job id (UUID) or a poison-… id"))
                }
                parsed.append(id)
            }
            return .success(.ids(parsed))
        }
        guard body["all"]?.boolValue == true else {
            return .failure(.unprocessable(field: "ids", reason: "give ids, or all: true with an optional filter"))
        }
        return .success(
            .all(JobSetFilter(errorCode: FailureCode(text: body["error_code"]?.stringValue), appID: appID, search: body["q"]?.stringValue)))
    }
}

/// A query parameter the admin cannot use, and why.
struct FieldProblem: Error, Equatable {
    var field: String
    var reason: String
}

/// An answer that refuses the request.
struct Refusal: Error {
    var response: Response

    static func unprocessable(field: String, reason: String) -> Refusal {
        Refusal(
            response: json(
                .unprocessableContent, .object(["errors": .array([.object(["field": .string(field), "reason": .string(reason)])])])))
    }

    static var unavailable: Refusal {
        var response = json(.serviceUnavailable, .object(["error": .string("temporarily unavailable, retry later")]))
        response.headers[.retryAfter] = "5"
        return Refusal(response: response)
    }
}

func json(_ status: HTTPResponse.Status, _ value: JSONValue) -> Response {
    Response(
        status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: AdminJSON.encode(value))))
}

func notFound() -> Response { json(.notFound, .object(["error": .string("not found")])) }

/// Adds the headers every admin answer carries: no caching, no framing, no content sniffing,
/// nothing loaded from anywhere.
struct AdminHeadersMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response = try await next(request, context)
        AdminHeaders.apply(to: &response)
        return response
    }
}

/// The security headers of every admin answer.
enum AdminHeaders {
    static let contentSecurityPolicy =
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    static func apply(to response: inout Response) {
        response.headers[.contentSecurityPolicy] = contentSecurityPolicy
        response.headers[.cacheControl] = "no-store"
        response.headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        response.headers[HTTPField.Name("X-Frame-Options")!] = "DENY"
        response.headers[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
    }
}
