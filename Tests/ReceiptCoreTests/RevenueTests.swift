import Foundation
import ReceiptCore
import Testing

/// The revenue figures' pure parts: a plan's period read from its length and normalised to a
/// month by integer arithmetic, the days of a range, and the levels carried from day to day.
@Suite("Revenue: plans, days and levels")
struct RevenueTests {
    static let day: TimeInterval = 86_400

    @Test("A period's length names its plan, short months and a daylight-saving hour included")
    func periods() {
        #expect(PlanPeriod(seconds: 7 * Self.day) == .week)
        #expect(PlanPeriod(seconds: 28 * Self.day - 3600) == .month)
        #expect(PlanPeriod(seconds: 31 * Self.day + 3600) == .month)
        #expect(PlanPeriod(seconds: 61 * Self.day) == .twoMonths)
        #expect(PlanPeriod(seconds: 92 * Self.day) == .threeMonths)
        #expect(PlanPeriod(seconds: 184 * Self.day) == .sixMonths)
        #expect(PlanPeriod(seconds: 366 * Self.day) == .year)
        #expect(PlanPeriod(seconds: 0) == nil)
    }

    @Test("A month's worth is exact integer arithmetic, halves rounded away from zero")
    func monthly() {
        #expect(PlanPeriod.week.monthly(1_990) == 8_623)  // 1990 × 52 / 12 = 8623.33
        #expect(PlanPeriod.week.monthly(3) == 13)  // 13.0
        #expect(PlanPeriod.month.monthly(9_990) == 9_990)
        #expect(PlanPeriod.threeMonths.monthly(29_990) == 9_997)  // 9996.67
        #expect(PlanPeriod.sixMonths.monthly(3) == 1)  // 0.5 → 1
        #expect(PlanPeriod.year.monthly(99_990) == 8_333)  // 8332.5 → 8333
        #expect(PlanPeriod.year.monthly(-99_990) == -8_333)
    }

    @Test("Days are real UTC dates: a range lists each, a wrong date none")
    func days() {
        #expect(RevenueDay.days(from: "2028-02-27", to: "2028-03-01") == ["2028-02-27", "2028-02-28", "2028-02-29", "2028-03-01"])
        #expect(RevenueDay.days(from: "2027-02-27", to: "2027-03-01") == ["2027-02-27", "2027-02-28", "2027-03-01"])
        #expect(RevenueDay.days(from: "2027-03-02", to: "2027-03-01").isEmpty)
        for wrong in ["2027-02-29", "2027-13-01", "2027-1-01", "27-01-01", "2027-01-00", "2027-01-01T00", "2027-+1-01", "-027-01-01", "２０２７-01-01"] {
            #expect(RevenueCalendar.date(wrong) == nil, "\(wrong)")
        }
        #expect(RevenueCalendar.text(Date(timeIntervalSince1970: 1_800_000_000)) == "2027-01-15")
        #expect(RevenueCalendar.date("2027-01-15") == Date(timeIntervalSince1970: 1_800_000_000 - 28_800))
    }

    @Test("Levels open from the days before, carry across empty days, and rates are basis points of the day's start")
    func figures() {
        var first = RevenueFlows(day: "2027-01-02", currency: "USD")
        first.grossMilli = 9_990
        first.purchases = 2
        first.refunds = 1
        first.refundsMilli = 990
        first.activeDelta = -1
        first.churned = 1
        first.mrrDeltaMilli = -9_990
        var shard = RevenueFlows(day: "2027-01-02", currency: "USD")
        shard.purchases = 2
        var euro = RevenueFlows(day: "2027-01-03", currency: "EUR")
        euro.activeDelta = 1
        euro.mrrDeltaMilli = 4_990
        let days = RevenueDay.figures(
            from: "2027-01-01", to: "2027-01-03", opening: ["USD": (4, 39_960)], flows: [first, shard, euro])
        #expect(days.map(\.day) == ["2027-01-01", "2027-01-02", "2027-01-03", "2027-01-03"])
        #expect(days.map(\.currency) == ["USD", "USD", "EUR", "USD"])
        #expect(days[0].activeSubscriptions == 4 && days[0].mrrMilli == 39_960 && days[0].grossMilli == 0)
        #expect(days[1].activeSubscriptions == 3 && days[1].mrrMilli == 29_970 && days[1].netMilli == 9_000)
        #expect(days[1].churnRateBasisPoints == 2_500 && days[1].refundRateBasisPoints == 2_500 && days[1].purchases == 4)
        #expect(days[2].activeSubscriptions == 1 && days[2].churnRateBasisPoints == 0)
        #expect(days[3].activeSubscriptions == 3)
    }
}
