import Foundation
import Hummingbird
import ReceiptCore

/// The Apple calls page: for each app with an In-App Purchase key, what it spent of its App Store
/// Server API budget this hour — a bar per endpoint against Apple's hourly limit, the last
/// minute's calls per second against the per-second limit, and what they were spent on.
extension AdminPages {
    func addAppleCallRoutes<Context: AdminRequestContext>(to router: Router<Context>) {
        router.get("/admin/apple-calls") { request, context in
            await page(request, context: context) { user, session in try await appleCallsPage(user: user, session: session) }
        }
    }

    private func appleCallsPage(user: Operator, session: AdminSessions.Session) async throws -> Response {
        guard let appleCalls else { return html(.notFound, "list", base(user, session)) }
        let at = now()
        let known = try await apps().filter { $0.serverAPIKeyID != nil }.sorted { $0.name < $1.name }
        let byBundle = Dictionary(known.map { ($0.bundleID, $0) }) { first, _ in first }
        let usages = try await appleCalls.usage(apps: known.map(\.bundleID), now: at)
        let sections: [[String: Any]] = usages.compactMap { usage in
            // The sandbox is shown only once it is used: most apps' sandbox hours are empty.
            guard let app = byBundle[usage.app], usage.environment == .production || !usage.lines.isEmpty else { return nil }
            return Self.section(app: app, usage: usage)
        }
        var values = base(user, session)
        values["appleCallsCurrent"] = true
        values["apps"] = sections
        values["empty"] = sections.isEmpty
        values["hourStartUTC"] = sections.isEmpty ? "" : Self.utc(HourlyCallBudget.nextHour(after: at).addingTimeInterval(-3600))
        return html(.ok, "apple-calls", values)
    }

    /// One app's table: every endpoint it called this hour or in the last minute, with its bar.
    private static func section(app: AppRecord, usage: AppleCallUsage) -> [String: Any] {
        let endpoints = ServerAPIEndpoint.allCases.filter { endpoint in usage.lines.contains { $0.endpoint == endpoint } }
        let rows: [[String: Any]] = endpoints.map { endpoint in
            let hourLimit = Int(endpoint.ratePerSecond(in: usage.environment) * 3600)
            let used = usage.hour(endpoint)
            let share = hourLimit > 0 ? min(1, Double(used) / Double(hourLimit)) : 1
            let purposes = usage.lines.filter { $0.endpoint == endpoint }.map { "\($0.purpose.rawValue) \($0.hour)" }
            return [
                "endpoint": endpoint.rawValue, "hour": used, "hourLimit": hourLimit, "percent": String(format: "%.1f", share * 100),
                "barWidth": String(format: "%.2f", share * 100), "perSecond": String(format: "%.2f", usage.perSecond(endpoint)),
                "perSecondLimit": String(format: "%g", endpoint.ratePerSecond(in: usage.environment)),
                "purposes": purposes.joined(separator: ", "), "high": share >= 0.8,
            ]
        }
        return [
            "name": app.name, "bundleID": app.bundleID, "environment": usage.environment.rawValue, "rows": rows, "idle": rows.isEmpty,
        ]
    }

    private static func utc(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withFullDate, .withTime, .withColonSeparatorInTime, .withSpaceBetweenDateAndTime]
        return formatter.string(from: date)
    }
}
