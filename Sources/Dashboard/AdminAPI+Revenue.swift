import Foundation
import Hummingbird
import ReceiptCore

/// An app's revenue figures in the admin API (issue 43):
///
/// - `GET /admin/api/apps/{app_id}/metrics?from=YYYY-MM-DD&to=YYYY-MM-DD` (role `viewer`; the last 30
///   days to today by default, at most ``RevenueCalendar/maxDays`` days): per day and currency, the
///   gross, refunds and net in milli-units (integers), purchases, refunds, new subscriptions,
///   renewals, active subscriptions and MRR at the day's end, churned subscriptions, and the churn
///   and refund rates in basis points. 404 for an unknown app, 422 naming `from` or `to`.
extension AdminAPI {
    func addRevenueRoutes<Context: AdminRequestContext>(to group: RouterGroup<Context>) {
        guard let revenue else { return }
        group.get("apps/{app_id}/metrics") { request, context in
            await authorized(request, context, .viewer) { _ in
                guard let appID = context.parameters.get("app_id").flatMap(UUID.init(uuidString:)) else { return notFound() }
                let range: (from: String, to: String)
                switch Self.revenueRange(request.uri.queryParameters, today: now()) {
                case .success(let value): range = value
                case .failure(let problem): return Refusal.unprocessable(field: problem.field, reason: problem.reason).response
                }
                return await answer(context) {
                    guard let days = try await revenue.revenue(appID: appID, from: range.from, to: range.to) else { return notFound() }
                    return json(.ok, Self.revenueJSON(appID: appID, range: range, days: days))
                }
            }
        }
    }

    /// `from` and `to` from the query string: real days, `from` not after `to`, at most
    /// ``RevenueCalendar/maxDays`` apart; the 30 days up to `today` when both are absent.
    static func revenueRange(_ query: Parameters, today: Date) -> Result<(from: String, to: String), FieldProblem> {
        let to = query.get("to") ?? RevenueCalendar.text(today)
        guard let end = RevenueCalendar.date(to) else { return .failure(FieldProblem(field: "to", reason: "must be a date, YYYY-MM-DD")) }
        let from = query.get("from") ?? RevenueCalendar.text(end.addingTimeInterval(-29 * 86_400))
        guard let start = RevenueCalendar.date(from) else {
            return .failure(FieldProblem(field: "from", reason: "must be a date, YYYY-MM-DD"))
        }
        guard start <= end else { return .failure(FieldProblem(field: "from", reason: "must not be after to")) }
        guard end.timeIntervalSince(start) < Double(RevenueCalendar.maxDays) * 86_400 else {
            return .failure(FieldProblem(field: "to", reason: "must be at most \(RevenueCalendar.maxDays) days after from"))
        }
        return .success((from, to))
    }

    static func revenueJSON(appID: UUID, range: (from: String, to: String), days: [RevenueDay]) -> JSONValue {
        func number(_ value: Int64) -> JSONValue { .number(Double(value)) }
        return .object([
            "app_id": .string(appID.canonical), "from": .string(range.from), "to": .string(range.to),
            "days": .array(
                days.map { day in
                    .object([
                        "day": .string(day.day), "currency": .string(day.currency), "gross_milli": number(day.grossMilli),
                        "refunds_milli": number(day.refundsMilli), "net_milli": number(day.netMilli), "purchases": number(day.purchases),
                        "refunds": number(day.refunds), "new_subscriptions": number(day.newSubscriptions),
                        "renewals": number(day.renewals), "active_subscriptions": number(day.activeSubscriptions),
                        "mrr_milli": number(day.mrrMilli), "churned": number(day.churned),
                        "churn_rate_basis_points": number(day.churnRateBasisPoints),
                        "refund_rate_basis_points": number(day.refundRateBasisPoints),
                    ])
                }),
        ])
    }
}
