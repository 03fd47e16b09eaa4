import Foundation
import Hummingbird
import ReceiptCore

/// The revenue page: an app's figures over a range of days, per currency, as charts (net per day,
/// active subscriptions and MRR at each day's end) and a table, from the same rollup as
/// `GET /admin/api/apps/{app_id}/metrics`.
///
/// - `GET /admin/revenue?app_id=…&from=YYYY-MM-DD&to=YYYY-MM-DD` (any role; the last 30 days by default).
extension AdminPages {
    func addRevenueRoutes<Context: AdminRequestContext>(to router: Router<Context>) {
        guard let revenue else { return }
        router.get("/admin/revenue") { request, context in
            await page(request, context: context) { user, session in
                var values = base(user, session)
                values["revenueCurrent"] = true
                let parameters = request.uri.queryParameters
                let appID = parameters["app_id"].flatMap { UUID(uuidString: String($0)) }
                let known = (try? await apps()) ?? []
                values["apps"] = known.map { ["id": $0.id.canonical, "name": $0.name, "selected": $0.id == appID] }
                values["hasApps"] = !known.isEmpty
                let range: (from: String, to: String)
                switch AdminAPI.revenueRange(parameters, today: now()) {
                case .success(let value): range = value
                case .failure(let problem):
                    values["problem"] = "\(problem.field) \(problem.reason)."
                    values["from"] = parameters["from"].map(String.init) ?? ""
                    values["to"] = parameters["to"].map(String.init) ?? ""
                    return html(.unprocessableContent, "revenue", values)
                }
                values["from"] = range.from
                values["to"] = range.to
                guard let app = known.first(where: { $0.id == appID }) else {
                    if appID != nil { values["problem"] = "No such app." }
                    return html(appID == nil ? .ok : .notFound, "revenue", values)
                }
                values["app"] = ["id": app.id.canonical, "name": app.name]
                let days = try await revenue.revenue(appID: app.id, from: range.from, to: range.to) ?? []
                let currencies = Array(Set(days.map(\.currency))).sorted()
                values["currencies"] = currencies.map { currency in Self.revenueSection(currency, days: days.filter { $0.currency == currency }) }
                values["hasFigures"] = !currencies.isEmpty
                return html(.ok, "revenue", values)
            }
        }
    }

    /// One currency's charts and table.
    static func revenueSection(_ currency: String, days: [RevenueDay]) -> [String: Any] {
        let labels = days.map(\.day)
        let money = { (milli: Int64) in Money.decimalText(thousandths: milli) }
        let count = { (value: Int64) in String(value) }
        let total = { (value: (RevenueDay) -> Int64) in days.reduce(Int64(0)) { $0 + value($1) } }
        return [
            "currency": currency,
            "netChart": RevenueChart.svg(name: "gross", label: "\(currency) net", days: labels, values: days.map(\.netMilli), unit: money),
            "mrrChart": RevenueChart.svg(name: "mrr", label: "\(currency) MRR", days: labels, values: days.map(\.mrrMilli), unit: money),
            "activeChart": RevenueChart.svg(
                name: "active", label: "active subscriptions", days: labels, values: days.map(\.activeSubscriptions), unit: count),
            "gross": money(total(\.grossMilli)), "refunds": money(total(\.refundsMilli)), "net": money(total(\.netMilli)),
            "newSubscriptions": total(\.newSubscriptions), "renewals": total(\.renewals), "churned": total(\.churned),
            "days": days.reversed().map { day -> [String: Any] in
                [
                    "day": day.day, "gross": money(day.grossMilli), "refunds": money(day.refundsMilli), "net": money(day.netMilli),
                    "purchases": day.purchases, "newSubscriptions": day.newSubscriptions, "renewals": day.renewals,
                    "active": day.activeSubscriptions, "mrr": money(day.mrrMilli), "churned": day.churned,
                    "churnRate": Money.decimalText(thousandths: day.churnRateBasisPoints * 10) + " %",
                    "refundRate": Money.decimalText(thousandths: day.refundRateBasisPoints * 10) + " %",
                ]
            },
        ]
    }
}
