import Foundation
import Hummingbird
import ReceiptCore

/// The notifications pages: what Apple pushed, newest first, filtered by type and app; one
/// notification with its decoded payload; the overview's counts by type and outcome.
extension AdminPages {
    func addNotificationRoutes<Context: AdminRequestContext>(to router: Router<Context>) {
        router.get("/admin/notifications") { request, context in
            await page(request, context: context) { user, session in try await notificationsPage(request, user: user, session: session) }
        }
        router.get("/admin/notifications/{id}") { request, context in
            await page(request, context: context) { user, session in
                try await notificationPage(id: context.parameters.get("id"), user: user, session: session)
            }
        }
    }

    /// The overview's table: one row per type, its outcomes counted (empty when Postgres is down:
    /// the overview is about Redis and must not fail with it).
    func notificationCounts(since: Date) async -> [[String: Any]] {
        guard let notifications, let counts = try? await notifications.counts(since: since) else { return [] }
        let byType = Dictionary(grouping: counts, by: \.type)
        return byType.keys.sorted().map { type in
            var row: [String: Any] = ["type": type]
            for outcome in NotificationOutcome.allCases {
                row[outcome.rawValue] = byType[type]?.first { $0.outcome == outcome }?.count ?? 0
            }
            return row
        }
    }

    private func notificationsPage(_ request: Request, user: Operator, session: AdminSessions.Session) async throws -> Response {
        guard let notifications else { return html(.notFound, "list", base(user, session)) }
        let query = request.uri.queryParameters
        var filter = NotificationFilter()
        var problem: String?
        if let type = query["type"].map(String.init), !type.isEmpty {
            if type.utf8.count <= 64, type.utf8.allSatisfy({ (65...90).contains($0) || (48...57).contains($0) || $0 == 95 }) {
                filter.type = type
            } else {
                problem = "type is an Apple notification type (capital letters, digits, _): the filter was not applied."
            }
        }
        if let text = query["app_id"].map(String.init), !text.isEmpty {
            if let id = UUID(uuidString: text) { filter.appID = id } else { problem = "app_id is not an app id: the filter was not applied." }
        }
        if problem != nil { filter = NotificationFilter() }
        let offset = max(0, min(query["offset"].flatMap { Int($0) } ?? 0, 1_000_000))
        let (entries, hasMore) = try await notifications.list(filter: filter, offset: offset, limit: Self.pageSize)
        let known = (try? await apps()) ?? []
        let names = Dictionary(known.map { ($0.id, $0.name) }) { first, _ in first }
        let at = now()
        var values = base(user, session)
        values["notificationsCurrent"] = true
        values["filterType"] = filter.type ?? ""
        values["filterAppID"] = filter.appID?.uuidString.lowercased() ?? ""
        values["filtered"] = filter != NotificationFilter()
        values["knownTypes"] = NotificationTypes.all
        values["hasApps"] = !known.isEmpty
        values["apps"] = known.map { app -> [String: Any] in
            ["id": app.id.uuidString.lowercased(), "name": app.name, "bundleID": app.bundleID, "selected": app.id == filter.appID]
        }
        values["hasEntries"] = !entries.isEmpty
        values["entries"] = entries.map { summaryValues($0, appName: names[$0.appID], now: at) }
        values["emptyText"] = filter == NotificationFilter() ? "No notification yet." : "No notification matches this filter."
        func url(_ offset: Int) -> String {
            var parts = ["offset=\(offset)"]
            if let type = filter.type { parts.append("type=\(type)") }
            if let app = filter.appID { parts.append("app_id=\(app.uuidString.lowercased())") }
            return "/admin/notifications?" + parts.joined(separator: "&")
        }
        if offset > 0 { values["previous"] = url(max(0, offset - Self.pageSize)) }
        if hasMore { values["next"] = url(offset + Self.pageSize) }
        if let problem { values["problem"] = problem }
        return html(problem == nil ? .ok : .unprocessableContent, "notifications", values)
    }

    private func notificationPage(id text: String?, user: Operator, session: AdminSessions.Session) async throws -> Response {
        var values = base(user, session)
        values["notificationsCurrent"] = true
        guard let notifications, let id = text.flatMap(UUID.init(uuidString:)), let found = try await notifications.notification(id: id) else {
            values["problem"] = "No such notification."
            values["hasEntries"] = false
            values["emptyText"] = ""
            return html(.notFound, "notifications", values)
        }
        let name = (try? await apps())?.first { $0.id == found.summary.appID }?.name
        values.merge(summaryValues(found.summary, appName: name, now: now())) { $1 }
        values["uuid"] = found.summary.uuid
        values["transaction"] = found.summary.transactionID ?? "—"
        values["payload"] = Self.pretty(found.payload)
        return html(.ok, "notification", values)
    }

    private func summaryValues(_ summary: NotificationSummary, appName: String?, now at: Date) -> [String: Any] {
        var values: [String: Any] = [
            "id": summary.id.uuidString.lowercased(), "type": summary.type, "version": summary.version.rawValue,
            "app": appName ?? summary.appID.uuidString.lowercased(), "environment": summary.environment ?? "—",
            "original": summary.originalTransactionID ?? "—", "outcome": summary.outcome.rawValue,
            "receivedUTC": Self.utc(summary.receivedAt), "receivedAgo": Self.relative(summary.receivedAt, now: at),
            "signedUTC": Self.utc(summary.signedAt), "signedAgo": Self.relative(summary.signedAt, now: at),
        ]
        if let subtype = summary.subtype { values["subtype"] = subtype }
        if let product = summary.productID { values["product"] = product }
        return values
    }

    /// The payload as indented JSON, keys sorted.
    static func pretty(_ value: JSONValue) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? ""
    }
}
