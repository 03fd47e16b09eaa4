import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Mustache
import NIOCore
import ReceiptCore

/// The operators' dashboard under `/admin`: server-rendered HTML (Mustache), no script at all, so
/// every action is a plain form and the CSP can forbid scripts outright.
///
/// - `GET /admin`: queues, retries, dead letters, workers, the circuit and the last hour's chart.
/// - `GET /admin/{dead|retries}`: a filtered, paged list with bulk retry and delete.
/// - `GET /admin/{dead|retries}/{id}`: one job, its envelope (receipt truncated) and its calls to Apple.
/// - `POST /admin/{dead|retries}/{retry|delete}`: by selected ids, or every entry matching a filter.
///
/// Logging in sets a signed session cookie (`HttpOnly`, `SameSite=Strict`, `Secure` in
/// production); every POST carries the session's CSRF token, and the login form a token bound
/// to a pre-session cookie. Mustache escapes every value; the chart is built from numbers only.
///
/// Each request looks the operator's role up afresh (`OperatorAuthenticator`): viewers see
/// every page but no action's button (and are refused with 403 if they post one anyway),
/// operators retry and delete, admins also manage webhooks. Every action, and every customer
/// look-up, is written to the audit log before it runs.
public struct AdminPages: Sendable {
    let dead: any JobSetStore
    let retries: any JobSetStore
    let overview: any QueueOverview
    let authenticator: OperatorAuthenticator
    let sessions: AdminSessions
    let actions: AuditedActions
    /// The webhook endpoints' administration (nil: no webhooks page).
    let webhooks: (any WebhookAdministration)?
    let apps: @Sendable () async throws -> [AppRecord]
    /// The stored App Store Server Notifications (nil: no notifications pages).
    let notifications: (any NotificationLog)?
    /// The customer look-up (nil: no customer view).
    let customers: (any CustomerDirectory)?
    let appleCalls: (any AppleCallLedger)?
    /// The App Store Server API's support endpoints (nil: no support actions on the customer view).
    let support: (any SupportDesk)?
    /// Queues history resyncs from the customer view (nil: no resync button).
    let resync: (any HistoryResync)?
    /// Erases customers from the customer view (nil: no erase button).
    let eraser: CustomerEraser?
    /// The entitlement catalogue and grants (nil: no entitlements page).
    let entitlements: (any EntitlementAdministration)?
    /// A user's entitlements by name, for the entitlements page.
    let customerEntitlements: (any CustomerCatalog)?
    /// The apps' revenue figures (nil: no revenue page).
    let revenue: (any RevenueFigures)?
    let now: @Sendable () -> Date
    let library: MustacheLibrary
    let stylesheet: [UInt8]

    static let pageSize = 50
    /// The largest form body the pages accept (413 beyond).
    public static let maxFormBytes = 1 << 20

    /// Creates the pages, reading the templates and stylesheet from the module's resources.
    /// - Parameters:
    ///   - dead: the dead letters.
    ///   - retries: the jobs waiting in backoff.
    ///   - overview: queue depths, workers, circuit, activity.
    ///   - authenticator: who may log in, with which role.
    ///   - sessions: the session cookies' keeper.
    ///   - audit: the audit log (nil only without Postgres: actions then go unrecorded).
    ///   - webhooks: the webhook endpoints' administration (nil: no webhooks page).
    ///   - apps: the registered apps, for the app filter (an error shows a plain text field instead).
    ///   - notifications: the stored notifications (Postgres), for their pages and the overview's counts.
    ///   - customers: the customer look-up (Postgres), for the customer view.
    ///   - support: the support endpoints, as actions on the customer view.
    ///   - resync: queues history resyncs (the customer view's button; nil: none).
    ///   - entitlements: the catalogue and grants (the entitlements page; nil: none).
    ///   - eraser: erases a customer (the customer view's button; nil: none).
    ///   - customerEntitlements: a user's entitlements by name, shown on that page.
    ///   - revenue: the apps' revenue figures (the revenue page; nil: none).
    ///   - now: the injected clock.
    /// - Throws: when a template is missing or does not parse (a broken build).
    public init(
        dead: any JobSetStore, retries: any JobSetStore, overview: any QueueOverview, authenticator: OperatorAuthenticator,
        sessions: AdminSessions, audit: (any AuditLog)? = nil, webhooks: (any WebhookAdministration)? = nil,
        apps: @escaping @Sendable () async throws -> [AppRecord] = { [] }, notifications: (any NotificationLog)? = nil,
        customers: (any CustomerDirectory)? = nil, appleCalls: (any AppleCallLedger)? = nil, support: (any SupportDesk)? = nil,
        resync: (any HistoryResync)? = nil, entitlements: (any EntitlementAdministration)? = nil, eraser: CustomerEraser? = nil,
        customerEntitlements: (any CustomerCatalog)? = nil, revenue: (any RevenueFigures)? = nil,
        now: @escaping @Sendable () -> Date = { Date() }
    ) throws {
        self.revenue = revenue
        self.support = support
        self.resync = resync
        self.eraser = eraser
        self.entitlements = entitlements
        self.customerEntitlements = customerEntitlements
        self.notifications = notifications
        self.customers = customers
        self.appleCalls = appleCalls
        self.dead = dead
        self.retries = retries
        self.overview = overview
        self.authenticator = authenticator
        self.sessions = sessions
        actions = AuditedActions(log: audit)
        self.webhooks = webhooks
        self.apps = apps
        self.now = now
        var library = MustacheLibrary()
        for name in [
            "layout", "login", "overview", "list", "detail", "notifications", "notification", "customer", "webhooks", "audit", "apple-calls",
            "support", "entitlements", "revenue",
        ] {
            guard let url = Bundle.module.url(forResource: name, withExtension: "mustache", subdirectory: "Templates") else {
                throw DashboardError(code: "template_missing", message: "Templates/\(name).mustache is not in the bundle")
            }
            try library.register(String(contentsOf: url, encoding: .utf8), named: name)
        }
        self.library = library
        guard let css = Bundle.module.url(forResource: "admin", withExtension: "css", subdirectory: "Assets") else {
            throw DashboardError(code: "asset_missing", message: "Assets/admin.css is not in the bundle")
        }
        stylesheet = Array(try Data(contentsOf: css))
    }

    /// Adds the routes to `router`.
    public func addRoutes<Context: AdminRequestContext>(to router: Router<Context>) {
        router.get("/admin/assets/admin.css") { _, _ in
            var response = Response(
                status: .ok, headers: [.contentType: "text/css; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(bytes: stylesheet)))
            AdminHeaders.apply(to: &response)
            return response
        }
        router.get("/admin/login") { request, _ in loginPage(request) }
        router.post("/admin/login") { request, context in try await login(request, context: context) }
        router.post("/admin/logout") { request, context in
            try await withForm(request, context: context, role: .viewer) { _, _, _ in
                var response = redirect("/admin/login")
                response.headers[.setCookie] = sessions.cookie(AdminSessions.cookieName, "", maxAge: 0)
                return response
            }
        }
        router.get("/admin") { request, context in
            await page(request, context: context) { user, session in try await overviewPage(user, session) }
        }
        if notifications != nil { addNotificationRoutes(to: router) }
        if customers != nil {
            addCustomerRoutes(to: router)
            addResyncRoutes(to: router)
            addErasureRoutes(to: router)
        }
        if appleCalls != nil { addAppleCallRoutes(to: router) }
        if support != nil { addSupportRoutes(to: router) }
        addAuditRoutes(to: router)
        if webhooks != nil { addWebhookRoutes(to: router) }
        addEntitlementRoutes(to: router)
        addRevenueRoutes(to: router)
        for kind in JobSetKind.allCases {
            let path = Self.path(kind)
            router.get("/admin/\(path)") { request, context in
                await page(request, context: context) { user, session in
                    try await listPage(kind, request: request, user: user, session: session)
                }
            }
            router.get("/admin/\(path)/{id}") { request, context in
                await page(request, context: context) { user, session in
                    try await detailPage(kind, id: context.parameters.get("id"), user: user, session: session)
                }
            }
            for action in ["retry", "delete"] {
                router.post("/admin/\(path)/\(action)") { request, context in
                    try await withForm(request, context: context, role: .operator) { form, user, _ in
                        try await mutate(kind, retry: action == "retry", form: form, user: user, context: context)
                    }
                }
            }
        }
    }

    static func path(_ kind: JobSetKind) -> String { kind == .dead ? "dead" : "retries" }

    func store(_ kind: JobSetKind) -> any JobSetStore { kind == .dead ? dead : retries }

    // MARK: Sessions

    func session(_ request: Request) -> AdminSessions.Session? {
        sessions.verify(cookieValue(AdminSessions.cookieName, in: request.headers[.cookie]), now: now())
    }

    /// The operator a request's session belongs to, with their current role; else the answer:
    /// the login form (no session, or one the account's reset or removal ended) or a 503 page.
    private func resume<Context: AdminRequestContext>(
        _ request: Request, _ context: Context
    ) async -> Result<
        (Operator, AdminSessions.Session), Refusal
    > {
        guard let session = session(request) else { return .failure(Refusal(response: redirect("/admin/login"))) }
        switch await authenticator.resume(session, address: authenticator.address(request, context)) {
        case .granted(let user): return .success((user, session))
        case .unavailable:
            return .failure(
                Refusal(
                    response: Self.plain(.serviceUnavailable, "The operator accounts cannot be read right now (Postgres). Reload in a few seconds.")))
        case .refused, .throttled:
            var response = redirect("/admin/login")
            response.headers[.setCookie] = sessions.cookie(AdminSessions.cookieName, "", maxAge: 0)
            return .failure(Refusal(response: response))
        }
    }

    /// A page for a logged-in operator (else to the login form); store errors become a 503 page.
    func page<Context: AdminRequestContext>(
        _ request: Request, context: Context, _ body: (Operator, AdminSessions.Session) async throws -> Response
    ) async -> Response {
        let user: Operator
        let session: AdminSessions.Session
        switch await resume(request, context) {
        case .success(let found): (user, session) = found
        case .failure(let refusal): return refusal.response
        }
        do {
            return try await body(user, session)
        } catch {
            context.logger.error("Admin page: a store is unreachable", error: error)
            var response = html(
                .serviceUnavailable, "list",
                base(user, session).merging(
                    ["heading": "Unavailable", "problem": "Redis or Postgres cannot be reached right now. Reload in a few seconds.", "set": "dead"]
                ) { $1 })
            response.headers[.retryAfter] = "5"
            return response
        }
    }

    /// Runs `body` for a form POST from a logged-in operator holding at least `role` whose CSRF
    /// token holds.
    func withForm<Context: AdminRequestContext>(
        _ request: Request, context: Context, role: OperatorRole, _ body: (FormFields, Operator, AdminSessions.Session) async throws -> Response
    ) async throws -> Response {
        let user: Operator
        let session: AdminSessions.Session
        switch await resume(request, context) {
        case .success(let found): (user, session) = found
        case .failure(let refusal): return refusal.response
        }
        let form: FormFields
        switch try await readForm(request) {
        case .fields(let fields): form = fields
        case .refused(let response): return response
        }
        guard sessions.verifyCSRF(form["csrf"], session: session) else {
            context.logger.warning("Admin form refused: CSRF token missing or wrong")
            return html(.forbidden, "list", base(user, session).merging(["heading": "Refused", "problem": Self.csrfProblem, "set": "dead"]) { $1 })
        }
        guard user.role >= role else {
            await authenticator.forbidden(user, door: .dashboardLogin, now: now())
            await actions.denied(user, "\(request.method.rawValue) \(request.uri.path)", source: "dashboard", logger: context.logger)
            let problem = "Your role (\(user.role.rawValue)) cannot do this: it needs \(role.rawValue). Ask an admin."
            return html(.forbidden, "list", base(user, session).merging(["heading": "Refused", "problem": problem, "set": "dead"]) { $1 })
        }
        do {
            return try await body(form, user, session)
        } catch {
            context.logger.error("Admin action: a store is unreachable", error: error)
            let problem =
                error is AuditedActions.Unavailable
                ? "The audit log cannot be written right now (Postgres); nothing was changed."
                : "Redis or Postgres cannot be reached right now; nothing was changed."
            var response = html(
                .serviceUnavailable, "list", base(user, session).merging(["heading": "Unavailable", "problem": problem, "set": "dead"]) { $1 })
            response.headers[.retryAfter] = "5"
            return response
        }
    }

    static let csrfProblem =
        "This form was not sent from this dashboard (its security token is missing or out of date). Reload the page and try again."

    /// An `application/x-www-form-urlencoded` body, or the answer refusing it.
    private enum FormRead {
        case fields(FormFields)
        case refused(Response)
    }

    private func readForm(_ request: Request) async throws -> FormRead {
        guard request.headers[.contentType]?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true else {
            return .refused(Self.plain(.unsupportedMediaType, "Content-Type must be application/x-www-form-urlencoded"))
        }
        do {
            let body = try await request.body.collect(upTo: Self.maxFormBytes)
            return .fields(FormFields(String(decoding: body.readableBytesView, as: UTF8.self)))
        } catch is NIOTooManyBytesError {
            return .refused(Self.plain(.contentTooLarge, "form larger than \(Self.maxFormBytes) bytes"))
        }
    }

    private func loginPage(_ request: Request, status: HTTPResponse.Status = .ok, problem: String? = nil) -> Response {
        if session(request) != nil, problem == nil { return redirect("/admin") }
        let challenge = sessions.loginChallenge()
        var values: [String: Any] = ["token": challenge.token]
        if let problem { values["problem"] = problem }
        var response = html(status, "login", values)
        response.headers[.setCookie] = sessions.cookie(AdminSessions.loginCookieName, challenge.nonce, maxAge: 3600)
        return response
    }

    private func login<Context: AdminRequestContext>(_ request: Request, context: Context) async throws -> Response {
        let at = now()
        let form: FormFields
        switch try await readForm(request) {
        case .fields(let fields): form = fields
        case .refused(let response): return response
        }
        guard sessions.verifyLogin(token: form["csrf"], nonce: cookieValue(AdminSessions.loginCookieName, in: request.headers[.cookie])) else {
            return loginPage(request, status: .forbidden, problem: "The login form expired. Try again.")
        }
        let user: Operator
        let address = authenticator.address(request, context)
        switch await authenticator.authenticate(
            username: form["username"] ?? "", password: form["password"] ?? "", door: .dashboardLogin, address: address, now: at)
        {
        case .granted(let found): user = found
        case .refused:
            return loginPage(request, status: .unauthorized, problem: "Wrong username or password.")
        case .throttled(let wait):
            var response = loginPage(request, status: .tooManyRequests, problem: "Too many failed logins. Try again in \(wait) s.")
            response.headers[.retryAfter] = String(wait)
            return response
        case .unavailable:
            return loginPage(request, status: .serviceUnavailable, problem: "The operator accounts cannot be read right now. Try again shortly.")
        }
        let (cookie, _) = sessions.issue(for: user, now: at)
        context.logger.info("Admin login", metadata: ["admin.user": "\(user.username)", "admin.role": "\(user.role.rawValue)"])
        var response = redirect("/admin")
        response.headers[values: .setCookie] = [
            sessions.cookie(AdminSessions.cookieName, cookie, maxAge: Int(sessions.lifetime.seconds)),
            sessions.cookie(AdminSessions.loginCookieName, "", maxAge: 0),
        ]
        return response
    }

    // MARK: Pages

    /// What every page's layout needs: the nav, with the sets' sizes when `counts` are given.
    func base(_ user: Operator, _ session: AdminSessions.Session, counts: (dead: Int, retries: Int)? = nil) -> [String: Any] {
        var values: [String: Any] = [
            "csrf": sessions.csrfToken(for: session), "username": user.username, "role": user.role.rawValue,
            "hasWebhooks": webhooks != nil, "hasAppleCalls": appleCalls != nil, "hasEntitlements": entitlements != nil,
            "hasRevenue": revenue != nil,
        ]
        if let counts {
            values["dead"] = counts.dead
            values["retries"] = counts.retries
        }
        // The forms of the page body need the token and the role too, outside the nav's section.
        return [
            "nav": values, "csrf": values["csrf"]!, "canOperate": user.role >= .operator, "canAdminister": user.role >= .admin,
        ]
    }

    private func listPage(_ kind: JobSetKind, request: Request, user: Operator, session: AdminSessions.Session) async throws -> Response {
        let query = request.uri.queryParameters
        let path = Self.path(kind)
        let (filter, offset, problem): (JobSetFilter, Int, String?) =
            switch AdminAPI.filter(query) {
            case .success(let (filter, offset, _)): (filter, offset, nil)
            case .failure(let problem): (JobSetFilter(), 0, "\(problem.field) \(problem.reason): the filter was not applied.")
            }
        let page = try await store(kind).list(filter: filter, offset: offset, limit: Self.pageSize)
        let counts = (try await dead.count(), try await retries.count())
        let known = (try? await apps()) ?? []
        let at = now()
        var values = base(user, session, counts: counts)
        values[kind == .dead ? "deadCurrent" : "retriesCurrent"] = true
        values["set"] = path
        values["heading"] = kind == .dead ? "Dead letters" : "Retries"
        values["intro"] =
            kind == .dead
            ? "Jobs given up on: a configuration error (fix it, then retry) or a failure that outlasted the retry budget."
            : "Jobs waiting in backoff. Retry now sends them to the queue at once, with a fresh retry budget."
        values["retryLabel"] = kind == .dead ? "Retry" : "Retry now"
        values["whenHeading"] = kind == .dead ? "Died" : "Runs"
        values["order"] = kind == .dead ? "newest first" : "soonest first"
        values["total"] = kind == .dead ? counts.0 : counts.1
        values["filtered"] = !filter.isEmpty
        values["filterErrorCode"] = filter.errorCode?.rawValue ?? ""
        values["filterAppID"] = filter.appID?.uuidString.lowercased() ?? ""
        values["filterSearch"] = filter.search ?? ""
        values["filterFields"] = Self.filterFields(filter)
        values["hasApps"] = !known.isEmpty
        values["apps"] = known.map { app -> [String: Any] in
            ["id": app.id.uuidString.lowercased(), "name": app.name, "bundleID": app.bundleID, "selected": app.id == filter.appID]
        }
        values["knownCodes"] = Array(Set(page.entries.compactMap(\.errorCode) + [.sharedSecretMismatch]).map(\.rawValue)).sorted()
        values["matchingLabel"] = page.totalIsExact ? "\(page.totalMatching)" : "at least \(page.totalMatching)"
        values["hasEntries"] = !page.entries.isEmpty
        values["from"] = page.offset + 1
        values["to"] = page.offset + page.entries.count
        values["entries"] = page.entries.map { entryValues($0, kind: kind, now: at) }
        values["emptyText"] = filter.isEmpty ? "Nothing here." : "Nothing matches this filter."
        if offset > 0 { values["previous"] = Self.listURL(kind, filter: filter, offset: max(0, offset - Self.pageSize)) }
        if let next = page.nextOffset { values["next"] = Self.listURL(kind, filter: filter, offset: next) }
        if let problem { values["problem"] = problem }
        if let notice = Self.notice(query) {
            values[notice.isProblem ? "problem" : "notice"] = notice.text
        }
        return html(problem == nil ? .ok : .unprocessableContent, "list", values)
    }

    private func detailPage(_ kind: JobSetKind, id text: String?, user: Operator, session: AdminSessions.Session) async throws -> Response {
        let counts = (try await dead.count(), try await retries.count())
        var values = base(user, session, counts: counts)
        values[kind == .dead ? "deadCurrent" : "retriesCurrent"] = true
        values["set"] = Self.path(kind)
        values["heading"] = kind == .dead ? "Dead letters" : "Retries"
        guard let id = text.flatMap(JobSetEntry.ID.init), let entry = try await store(kind).entry(id: id) else {
            values["problem"] = "This job is not in the \(kind == .dead ? "dead letters" : "retries") (any more): it was retried or deleted."
            values["emptyText"] = ""
            return html(.notFound, "list", values)
        }
        let at = now()
        values.merge(entryValues(entry, kind: kind, now: at)) { $1 }
        values["retryLabel"] = kind == .dead ? "Retry" : "Retry now"
        values["whenHeading"] = kind == .dead ? "Died" : "Runs"
        values["origin"] = entry.origin?.rawValue ?? ""
        values["enqueuedUTC"] = Self.utc(entry.enqueuedAt)
        values["enqueuedAgo"] = Self.relative(entry.enqueuedAt, now: at)
        let calls = entry.envelope?.history ?? []
        values["hasCalls"] = !calls.isEmpty
        values["calls"] = calls.enumerated().map { index, call -> [String: Any] in
            [
                "number": index + 1, "endpoint": call.endpoint.rawValue, "httpStatus": call.httpStatus.map(String.init) ?? "—",
                "appleStatus": call.appleStatus.map(String.init) ?? "—", "retryable": call.isRetryable.map { $0 ? "yes" : "no" } ?? "—",
                "latency": call.latencyMs, "error": call.errorCode?.rawValue ?? "",
            ]
        }
        values["envelope"] = Self.prettyEnvelope(entry)
        return html(.ok, "detail", values)
    }

    /// One entry's values. Optional ones are left out rather than empty: a Mustache section shows
    /// for an empty string.
    private func entryValues(_ entry: JobSetEntry, kind: JobSetKind, now at: Date) -> [String: Any] {
        var values: [String: Any] = [
            "id": entry.id.rawValue, "shortID": Self.shortID(entry.id), "poison": entry.isPoison,
            "repoll": entry.kind == .repoll, "bundleID": entry.bundleID ?? "—", "errorMessage": entry.errorMessage ?? "",
            "attempts": entry.attempts,
            "firstUTC": Self.utc(entry.firstFailedAt), "firstAgo": Self.relative(entry.firstFailedAt, now: at),
            "lastUTC": Self.utc(entry.lastFailedAt), "lastAgo": Self.relative(entry.lastFailedAt, now: at),
            "whenUTC": Self.utc(entry.score), "when": Self.relative(entry.score, now: at),
        ]
        values["appID"] = entry.appID?.uuidString.lowercased()
        values["user"] = entry.userIdentifier.flatMap { $0.isEmpty ? nil : $0 }
        values["errorCode"] = entry.errorCode?.rawValue
        values["kind"] = entry.kind?.rawValue
        if let webhook = entry.envelope?.payload.delivery?.target {
            values["webhook"] = [
                "eventType": webhook.eventType, "eventID": webhook.eventID.canonical, "endpointID": webhook.endpointID.canonical,
            ]
        }
        return values
    }

    // MARK: Rendering

    func html(_ status: HTTPResponse.Status, _ template: String, _ values: [String: Any]) -> Response {
        let text = library.render(values, withTemplate: template) ?? "template \(template) missing"
        var response = Response(
            status: status, headers: [.contentType: "text/html; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text)))
        AdminHeaders.apply(to: &response)
        return response
    }

    func redirect(_ location: String) -> Response {
        var response = Response(status: .seeOther, headers: [.location: location])
        AdminHeaders.apply(to: &response)
        return response
    }

    static func plain(_ status: HTTPResponse.Status, _ text: String) -> Response {
        var response = Response(
            status: status, headers: [.contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text + "\n")))
        AdminHeaders.apply(to: &response)
        return response
    }

    /// Whether `path` is one of the dashboard's HTML pages (not its JSON API).
    public static func isPage(_ path: String) -> Bool {
        path == "/admin" || (path.hasPrefix("/admin/") && !path.hasPrefix("/admin/api/"))
    }

    /// The shared gate's refusal (`InputHygieneMiddleware`) for a page or a form: plain text, with
    /// the dashboard's security headers.
    public static func refusal(status: HTTPResponse.Status, errors: [FieldError]) -> Response {
        let text = errors.map { "\($0.field): \($0.reason)" }.joined(separator: "\n")
        return plain(status, text.isEmpty ? "request too large" : text)
    }
}

/// An error of the dashboard's own making (a broken build), with a bounded code.
public struct DashboardError: Error, CustomStringConvertible {
    public var code: String
    public var message: String

    public var description: String { "DashboardError.\(code): \(message)" }
}
