import Foundation
import Hummingbird
import ReceiptCore

/// The audit log page: every action taken through the dashboard, the admin API and the command
/// line (who, when, what, how many jobs), newest first, filtered by actor, action or customer.
extension AdminPages {
    static let auditPageSize = 100

    func addAuditRoutes<Context: AdminRequestContext>(to router: Router<Context>) {
        router.get("/admin/audit") { request, context in
            await page(request, context: context) { user, session in try await auditPage(request, user: user, session: session) }
        }
    }

    private func auditPage(_ request: Request, user: Operator, session: AdminSessions.Session) async throws -> Response {
        var values = base(user, session)
        values["auditCurrent"] = true
        let query = request.uri.queryParameters
        let (filter, before, problem): (AuditFilter, Int64?, String?) =
            switch AdminAPI.auditQuery(query) {
            case .success(let (filter, before, _)): (filter, before, nil)
            case .failure(let problem): (AuditFilter(), nil, "\(problem.field) \(problem.reason): the filter was not applied.")
            }
        values["filterActor"] = filter.actor ?? ""
        values["filterAction"] = filter.action ?? ""
        values["filterUser"] = filter.userIdentifier ?? ""
        if let problem { values["problem"] = problem }
        guard let log = actions.log else {
            values["empty"] = true
            return html(.ok, "audit", values)
        }
        let entries = try await log.entries(filter, before: before, limit: Self.auditPageSize)
        let at = now()
        values["entries"] = entries.map { auditValues($0, now: at) }
        values["empty"] = entries.isEmpty
        if entries.count == Self.auditPageSize, let last = entries.last {
            var components = URLComponents()
            components.path = "/admin/audit"
            components.queryItems =
                [("actor", filter.actor), ("action", filter.action), ("user_identifier", filter.userIdentifier)].compactMap { name, value in
                    value.map { URLQueryItem(name: name, value: $0) }
                } + [URLQueryItem(name: "before", value: String(last.id))]
            values["older"] = components.string ?? "/admin/audit"
        }
        return html(problem == nil ? .ok : .unprocessableContent, "audit", values)
    }

    /// One audit line's values (the audit page's and the customer view's).
    func auditValues(_ entry: AuditEntry, now at: Date) -> [String: Any] {
        var values: [String: Any] = [
            "id": entry.id, "atUTC": Self.utc(entry.at), "ago": Self.relative(entry.at, now: at), "actor": entry.actor,
            "action": entry.action, "source": entry.source, "outcome": entry.outcome, "target": entry.target ?? "",
            "users": entry.userIdentifiers.joined(separator: ", "),
        ]
        values["role"] = entry.role
        values["jobs"] = entry.jobCount
        values["address"] = entry.clientAddress
        return values
    }
}
