import Foundation
import Hummingbird
import ReceiptCore

/// The entitlements page: an app's catalogue (entitlement → products), and for one user what they
/// are entitled to now (by name, with what holds it) and the grants operators made them.
///
/// - `GET /admin/entitlements?app_id=…[&user=…]`
/// - `POST /admin/entitlements/define` (admin): creates or replaces an entitlement.
/// - `POST /admin/entitlements/remove` (admin, confirmed): removes one; its grants stay.
/// - `POST /admin/entitlements/grant` (operator): grants an entitlement to the user, until a day or for good.
/// - `POST /admin/entitlements/revoke` (operator): revokes one grant.
///
/// Every change goes through the same port as the admin API's (one audit line each, the grant's
/// and revocation's events); a form's mistake is answered on the page with a 422 naming the field.
extension AdminPages {
    func addEntitlementRoutes<Context: AdminRequestContext>(to router: Router<Context>) {
        guard entitlements != nil else { return }
        router.get("/admin/entitlements") { request, context in
            await page(request, context: context) { user, session in
                let parameters = request.uri.queryParameters
                let target = EntitlementTarget(
                    appID: parameters["app_id"].flatMap { UUID(uuidString: String($0)) },
                    user: parameters["user"].map(String.init)?.trimmingCharacters(in: .whitespaces).nonEmpty)
                return try await entitlementsPage(target, user: user, session: session, notice: Self.entitlementNotice(parameters["done"]))
            }
        }
        router.post("/admin/entitlements/{action}") { request, context in
            let action = context.parameters.get("action") ?? ""
            let role: OperatorRole = ["define", "remove"].contains(action) ? .admin : .operator
            return try await withForm(request, context: context, role: role) { form, user, session in
                try await entitlementAction(action, form: form, user: user, session: session)
            }
        }
    }

    /// The app (and maybe the user) a page or a form is about.
    struct EntitlementTarget {
        var appID: UUID?
        var user: String?

        /// The page's address for this target, with a fixed notice.
        func location(done: String? = nil) -> String {
            var allowed = CharacterSet.alphanumerics
            allowed.insert(charactersIn: "-._~")
            var query = [
                appID.map { "app_id=\($0.canonical)" }, user.map { "user=\($0.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" },
            ]
            query.append(done.map { "done=\($0)" })
            let text = query.compactMap { $0 }.joined(separator: "&")
            return "/admin/entitlements" + (text.isEmpty ? "" : "?\(text)")
        }
    }

    private func entitlementsPage(
        _ target: EntitlementTarget, user: Operator, session: AdminSessions.Session, status: HTTPResponse.Status = .ok,
        notice: (text: String, isProblem: Bool)? = nil
    ) async throws -> Response {
        guard let entitlements else { return Self.plain(.notFound, "no entitlements here") }
        var values = base(user, session)
        values["entitlementsCurrent"] = true
        let known = (try? await apps()) ?? []
        let app = known.first { $0.id == target.appID }
        values["apps"] = known.map { ["id": $0.id.canonical, "name": $0.name, "selected": $0.id == target.appID] }
        values["hasApps"] = !known.isEmpty
        values["user"] = target.user ?? ""
        if let notice { values[notice.isProblem ? "problem" : "notice"] = notice.text }
        guard let app else {
            if target.appID != nil, status == .ok { values["problem"] = "No such app." }
            return html(target.appID == nil ? status : .notFound, "entitlements", values)
        }
        let at = now()
        values["app"] = ["id": app.id.canonical, "name": app.name]
        let catalogue = try await entitlements.catalogue(appID: app.id)
        values["catalogue"] = catalogue.map { definition -> [String: Any] in
            ["id": definition.id, "products": definition.products.joined(separator: ", "), "description": definition.description ?? ""]
        }
        values["hasCatalogue"] = !catalogue.isEmpty
        if let customer = target.user, let customers = customerEntitlements {
            let resource = try await customers.customer(appID: app.id, userIdentifier: customer)
            let held = resource.entitlements(at: at, sandboxPolicy: app.sandboxPolicy)
            values["customer"] = [
                "user": customer,
                "held": held.map { entitlement -> [String: Any] in
                    [
                        "id": entitlement.id, "until": entitlement.expiresAt.map { Self.utc($0) } ?? "for good",
                        "sources": entitlement.sources.map { source in
                            "\(source.kind.rawValue) \(source.productID.map { "\($0) " } ?? "")(\(source.reference))"
                        }.joined(separator: "; "),
                    ]
                },
                "hasHeld": !held.isEmpty,
                "grants": resource.grants.map { grant -> [String: Any] in
                    var row: [String: Any] = [
                        "id": grant.id.canonical, "entitlement": grant.entitlement, "by": grant.grantedBy,
                        "granted": Self.utc(grant.grantedAt), "until": grant.expiresAt.map { Self.utc($0) } ?? "until revoked",
                        "reason": grant.reason ?? "", "active": grant.isActive(at: at),
                    ]
                    row["state"] =
                        grant.revokedAt.map { "revoked \(Self.relative($0, now: at))\(grant.revokedBy.map { " by \($0)" } ?? "")" }
                        ?? (grant.isActive(at: at) ? "active" : "expired")
                    return row
                },
                "hasGrants": !resource.grants.isEmpty,
            ]
        }
        return html(status, "entitlements", values)
    }

    private func entitlementAction(_ action: String, form: FormFields, user: Operator, session: AdminSessions.Session) async throws -> Response {
        guard let entitlements else { return Self.plain(.notFound, "no entitlements here") }
        let target = EntitlementTarget(
            appID: form["app_id"].flatMap(UUID.init(uuidString:)), user: form["user"]?.trimmingCharacters(in: .whitespaces).nonEmpty)
        guard let appID = target.appID else {
            return try await entitlementsPage(target, user: user, session: session, status: .unprocessableContent, notice: ("Choose an app.", true))
        }
        func refused(_ field: String, _ reason: String) async throws -> Response {
            try await entitlementsPage(target, user: user, session: session, status: .unprocessableContent, notice: ("\(field) \(reason).", true))
        }
        let entitlement = form["entitlement"]?.trimmingCharacters(in: .whitespaces) ?? ""
        do {
            switch action {
            case "define":
                let products = (form["products"] ?? "").split(whereSeparator: { $0 == "," || $0.isNewline }).map {
                    $0.trimmingCharacters(in: .whitespaces)
                }.filter { !$0.isEmpty }
                let description = form["description"]?.trimmingCharacters(in: .whitespaces).nonEmpty
                switch EntitlementDefinition.validate(id: entitlement, products: products, description: description) {
                case .success(let definition):
                    try await entitlements.define(
                        definition, appID: appID, audit: user.audit("entitlement.define", source: "dashboard", appID: appID))
                    return redirect(target.location(done: "defined"))
                case .failure(let problem): return try await refused(problem.field, problem.reason)
                }
            case "remove":
                guard form["confirm"] == "1" else { return redirect(target.location(done: "unconfirmed")) }
                try await entitlements.remove(
                    entitlement: entitlement, appID: appID, audit: user.audit("entitlement.remove", source: "dashboard", appID: appID))
                return redirect(target.location(done: "removed"))
            case "grant":
                guard let customer = target.user, customer.unicodeScalars.count <= 255 else {
                    return try await refused("user", "is required (at most 255 characters)")
                }
                let at = now()
                var body: [String: JSONValue] = ["entitlement": .string(entitlement)]
                if let day = form["expires_on"]?.trimmingCharacters(in: .whitespaces).nonEmpty {
                    // A day in the form: the grant lasts until that day ends (UTC).
                    body["expires_at"] = .string("\(day)T23:59:59Z")
                }
                if let reason = form["reason"]?.nonEmpty { body["reason"] = .string(reason) }
                switch GrantRequest.parse(.object(body), now: at) {
                case .success(let request):
                    _ = try await entitlements.grant(
                        entitlement: request.entitlement, userIdentifier: customer, appID: appID, expiresAt: request.expiresAt,
                        reason: request.reason, audit: user.audit("entitlement.grant", source: "dashboard", appID: appID, users: [customer]), at: at)
                    return redirect(target.location(done: "granted"))
                case .failure(let problem):
                    return try await refused(problem.field == "expires_at" ? "expires_on" : problem.field, problem.reason)
                }
            case "revoke":
                guard let customer = target.user, let id = form["grant"].flatMap(UUID.init(uuidString:)) else {
                    return try await refused("grant", "is not one of the user's grants")
                }
                _ = try await entitlements.revoke(
                    grant: id, userIdentifier: customer, appID: appID,
                    audit: user.audit("entitlement.revoke", source: "dashboard", appID: appID, users: [customer]), at: now())
                return redirect(target.location(done: "revoked"))
            default:
                return try await entitlementsPage(target, user: user, session: session, status: .notFound, notice: ("No such action.", true))
            }
        } catch let error as EntitlementAdminError {
            switch error {
            case .unknownEntitlement: return try await refused("entitlement", "is not in the app's entitlement catalogue")
            case .grantNotFound: return try await refused("grant", "is not one of the user's grants")
            case .unknownApp: return try await refused("app_id", "is not an app")
            }
        }
    }

    /// The message a redirect asks for: a fixed text, never one from the URL.
    static func entitlementNotice(_ done: Substring?) -> (text: String, isProblem: Bool)? {
        switch done {
        case "defined": ("Saved: the entitlement's products entitle from now on.", false)
        case "removed": ("Removed from the catalogue (its grants stay, and entitle again if it is defined again).", false)
        case "unconfirmed": ("Nothing was removed: tick “yes, remove it”.", true)
        case "granted": ("Granted, with an entitlement.granted event.", false)
        case "revoked": ("Revoked, with an entitlement.revoked event.", false)
        default: nil
        }
    }
}

extension String {
    /// Nil for an empty string.
    fileprivate var nonEmpty: String? { isEmpty ? nil : self }
}
