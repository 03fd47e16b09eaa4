import BaseSupport
import Foundation

/// An auto-renewable plan's billing period, read from one period's length (Apple's signed
/// transactions carry the period's start and end, not its name), for the MRR: each plan's price
/// normalised to a month.
public enum PlanPeriod: String, Sendable, CaseIterable {
    case week = "P1W"
    case month = "P1M"
    case twoMonths = "P2M"
    case threeMonths = "P3M"
    case sixMonths = "P6M"
    case year = "P1Y"

    /// The standard period nearest to `seconds` (a period's end minus its start): a month is 28 to
    /// 31 days, and the boundaries lie halfway between neighbours, so a period shortened by a
    /// daylight-saving change or a short month still reads right. Nil for a non-positive length.
    public init?(seconds: TimeInterval) {
        guard seconds > 0 else { return nil }
        let days = seconds / 86_400
        switch days {
        case ..<18: self = .week
        case ..<45: self = .month
        case ..<75: self = .twoMonths
        case ..<135: self = .threeMonths
        case ..<270: self = .sixMonths
        default: self = .year
        }
    }

    /// `price` (milli-units for one period) as a month's worth, rounded to the nearest milli-unit
    /// (halves away from zero) by integer arithmetic: a week is 52/12 of itself, two months 1/2,
    /// three 1/3, six 1/6, a year 1/12.
    public func monthly(_ price: Int64) -> Int64 {
        let (numerator, denominator): (Int64, Int64) =
            switch self {
            case .week: (52, 12)
            case .month: (1, 1)
            case .twoMonths: (1, 2)
            case .threeMonths: (1, 3)
            case .sixMonths: (1, 6)
            case .year: (1, 12)
            }
        let scaled = price * numerator
        let half = denominator / 2
        return scaled >= 0 ? (scaled + half) / denominator : -((-scaled + half) / denominator)
    }
}

/// One currency's flows of one app on one day, as the worker adds them up in the transaction that
/// stores what changed (the rollup, `revenue_daily`): the deltas of active subscriptions and MRR
/// are changes on that day, not levels.
public struct RevenueFlows: Sendable, Equatable {
    /// The day (UTC), `YYYY-MM-DD`.
    public var day: String
    /// ISO 4217, or `XXX` where Apple's answer named no price (verifyReceipt).
    public var currency: String
    public var grossMilli: Int64 = 0
    public var purchases: Int64 = 0
    public var refundsMilli: Int64 = 0
    public var refunds: Int64 = 0
    public var newSubscriptions: Int64 = 0
    public var renewals: Int64 = 0
    public var churned: Int64 = 0
    public var activeDelta: Int64 = 0
    public var mrrDeltaMilli: Int64 = 0

    /// Creates a day's flows (zero unless given).
    public init(day: String, currency: String) {
        self.day = day
        self.currency = currency
    }
}

/// One currency's figures of one app on one day: the flows of the day and the levels at its end.
/// Rates are integers in basis points (1/100 of a percent), never floats.
public struct RevenueDay: Sendable, Equatable {
    public var day: String
    public var currency: String
    public var grossMilli: Int64
    public var refundsMilli: Int64
    /// Gross less refunds.
    public var netMilli: Int64 { grossMilli - refundsMilli }
    public var purchases: Int64
    public var refunds: Int64
    public var newSubscriptions: Int64
    public var renewals: Int64
    /// Subscriptions entitling at the day's end.
    public var activeSubscriptions: Int64
    /// The monthly recurring revenue at the day's end: every entitling plan's price as a month's.
    public var mrrMilli: Int64
    /// Subscriptions that stopped entitling on the day.
    public var churned: Int64
    /// `churned` ÷ active subscriptions at the day's start, in basis points (0 when none was active).
    public var churnRateBasisPoints: Int64
    /// Refunds ÷ purchases of the day, by count, in basis points (0 without purchases).
    public var refundRateBasisPoints: Int64

    /// The figures of every currency on every day of `from...to` (both `YYYY-MM-DD`, UTC), in day
    /// then currency order: `opening` holds each currency's active subscriptions and MRR before
    /// `from` (the sum of every earlier day's deltas), `flows` the rollup's rows of the range
    /// (several rows of one day and currency are added up). A currency appears on every day from
    /// the first it has anything to show.
    public static func figures(
        from: String, to: String, opening: [String: (active: Int64, mrrMilli: Int64)], flows: [RevenueFlows]
    ) -> [RevenueDay] {
        var byDay: [String: [String: RevenueFlows]] = [:]
        for row in flows where row.day >= from && row.day <= to {
            var sum = byDay[row.day]?[row.currency] ?? RevenueFlows(day: row.day, currency: row.currency)
            sum.grossMilli += row.grossMilli
            sum.purchases += row.purchases
            sum.refundsMilli += row.refundsMilli
            sum.refunds += row.refunds
            sum.newSubscriptions += row.newSubscriptions
            sum.renewals += row.renewals
            sum.churned += row.churned
            sum.activeDelta += row.activeDelta
            sum.mrrDeltaMilli += row.mrrDeltaMilli
            byDay[row.day, default: [:]][row.currency] = sum
        }
        var level = opening
        var days: [RevenueDay] = []
        for day in Self.days(from: from, to: to) {
            let today = byDay[day] ?? [:]
            for currency in Set(level.keys).union(today.keys).sorted() {
                let flow = today[currency] ?? RevenueFlows(day: day, currency: currency)
                let start = level[currency] ?? (0, 0)
                let end = (active: start.active + flow.activeDelta, mrrMilli: start.mrrMilli + flow.mrrDeltaMilli)
                level[currency] = end
                days.append(
                    RevenueDay(
                        day: day, currency: currency, grossMilli: flow.grossMilli, refundsMilli: flow.refundsMilli,
                        purchases: flow.purchases, refunds: flow.refunds, newSubscriptions: flow.newSubscriptions,
                        renewals: flow.renewals, activeSubscriptions: end.active, mrrMilli: end.mrrMilli, churned: flow.churned,
                        churnRateBasisPoints: Self.basisPoints(flow.churned, of: start.active),
                        refundRateBasisPoints: Self.basisPoints(flow.refunds, of: flow.purchases)))
            }
        }
        return days
    }

    /// `part` ÷ `whole` in basis points, rounded down; 0 when `whole` is not positive.
    static func basisPoints(_ part: Int64, of whole: Int64) -> Int64 {
        whole > 0 ? part * 10_000 / whole : 0
    }

    /// Every day of `from...to` (`YYYY-MM-DD`), empty when either is not a date or `to` is before `from`.
    public static func days(from: String, to: String) -> [String] {
        guard var day = RevenueCalendar.date(from), let end = RevenueCalendar.date(to), day <= end else { return [] }
        var days: [String] = []
        while day <= end {
            days.append(RevenueCalendar.text(day))
            day = day.addingTimeInterval(86_400)
        }
        return days
    }
}

/// The revenue figures' days: UTC calendar dates written `YYYY-MM-DD` (the one civil-date
/// arithmetic, ``CivilDate``).
public enum RevenueCalendar {
    /// The most days one request of figures may span.
    public static let maxDays = 400

    /// The start (UTC midnight) of the day `text` names; nil unless it is a real `YYYY-MM-DD` date.
    public static func date(_ text: String) -> Date? {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        // ASCII digits and dashes only: Int() would also take a sign ("2027-+1-01").
        guard text.utf8.count == 10, text.utf8.allSatisfy({ $0 == UInt8(ascii: "-") || (48...57).contains($0) }),
            parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
            let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2]), (1...12).contains(month), day >= 1
        else { return nil }
        let days = CivilDate.days(year: year, month: month, day: day)
        // A day past the month's end (02-30) counts on into the next month: not a real date.
        guard CivilDate.fields(days: days) == (year, month, day) else { return nil }
        return Date(timeIntervalSince1970: Double(days) * 86_400)
    }

    /// The UTC day of `date`, `YYYY-MM-DD`: the date part of the one UTC formatter (which clamps a
    /// nonsense date to years 0001...9999 instead of trapping).
    public static func text(_ date: Date) -> String { String(ReceiptDate.format(date).prefix(10)) }
}
