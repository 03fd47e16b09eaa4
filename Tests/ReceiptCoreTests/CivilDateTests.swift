import BaseSupport
import Foundation
import Testing

/// The one civil-date function (Libpq's `timestamptz` text and the receipts' dates both use it)
/// against Foundation's Gregorian calendar.
@Suite("Civil date arithmetic")
struct CivilDateTests {
    /// Foundation's UTC Gregorian calendar, which is Julian before 1582-10-15.
    static let calendar: Calendar = {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar
    }()

    /// The Gregorian rules repeat every 400 years, which are exactly this many days.
    static let cycle = 146_097

    /// 1582-10-15, the first day Foundation counts in the Gregorian calendar.
    static let gregorianStart = -141_427

    /// What Foundation says day `days` (since 1970-01-01) is, for a day it counts as Gregorian.
    static func foundationFields(days: Int) -> (year: Int, month: Int, day: Int) {
        let components = calendar.dateComponents([.era, .year, .month, .day], from: Date(timeIntervalSince1970: Double(days) * 86_400))
        return (components.year!, components.month!, components.day!)
    }

    @Test("Every day of a whole 400-year cycle (1600–2000) is the day Foundation's Gregorian calendar names, both ways")
    func agreesWithFoundationOverAWholeCycle() {
        let first = CivilDate.days(year: 1600, month: 1, day: 1)
        #expect(first == -135_140)
        var mismatches: [Int] = []
        for days in first..<(first + Self.cycle) {
            let ours = CivilDate.fields(days: days)
            let theirs = Self.foundationFields(days: days)
            if ours != theirs || CivilDate.days(year: theirs.year, month: theirs.month, day: theirs.day) != days {
                mismatches.append(days)
            }
        }
        #expect(mismatches.isEmpty, "first mismatches: \(mismatches.prefix(5))")
    }

    @Test("Random days from 1582-10-15 to the year 200,000 agree with Foundation")
    func agreesWithFoundationFarAhead() {
        var generator = SystemRandomNumberGenerator()
        let last = CivilDate.days(year: 200_000, month: 12, day: 31)
        for _ in 0..<20_000 {
            let days = Int.random(in: Self.gregorianStart...last, using: &generator)
            let theirs = Self.foundationFields(days: days)
            #expect(CivilDate.fields(days: days) == theirs, "day \(days)")
            #expect(CivilDate.days(year: theirs.year, month: theirs.month, day: theirs.day) == days, "\(theirs)")
        }
    }

    /// Before 1582-10-15 Foundation switches to the Julian calendar, while Postgres (and so both
    /// callers) keep the Gregorian rules: year 1 is what Postgres's `0001-01-01` means. Those days
    /// are checked against Foundation through the 400-year period of the rules: day `d` is
    /// Foundation's date of day `d + k·146,097`, `400·k` years earlier.
    @Test("Days before 1582, back to year 1 and into negative (BC) years, agree with Foundation shifted by whole 400-year cycles")
    func agreesWithFoundationBeforeTheGregorianReform() {
        var generator = SystemRandomNumberGenerator()
        let earliest = CivilDate.days(year: -100_000, month: 1, day: 1)
        let samples = (0..<20_000).map { _ in Int.random(in: earliest..<Self.gregorianStart, using: &generator) }
        for days in samples + [CivilDate.days(year: 1, month: 1, day: 1), -719_468, -1] {
            // The smallest whole number of cycles that lands on a day Foundation counts as Gregorian.
            let cycles = (Self.gregorianStart - days + Self.cycle - 1) / Self.cycle
            let shifted = Self.foundationFields(days: days + cycles * Self.cycle)
            let expected = (year: shifted.year - 400 * cycles, month: shifted.month, day: shifted.day)
            #expect(CivilDate.fields(days: days) == expected, "day \(days)")
            #expect(CivilDate.days(year: expected.year, month: expected.month, day: expected.day) == days, "\(expected)")
        }
        // The dates Postgres and the receipts' clamp start at: 0001-01-01T00:00:00Z.
        #expect(CivilDate.days(year: 1, month: 1, day: 1) * 86_400 == -62_135_596_800)
        #expect(CivilDate.fields(days: -719_468) == (0, 3, 1))
        #expect(CivilDate.fields(days: -1) == (1969, 12, 31))
        #expect(CivilDate.fields(days: 0) == (1970, 1, 1))
    }

    @Test("A day past the month's end counts on into the next month (the text parsers accept days 1–31 in every month)")
    func countsOnPastTheMonthsEnd() {
        #expect(CivilDate.days(year: 2023, month: 2, day: 29) == CivilDate.days(year: 2023, month: 3, day: 1))
        #expect(CivilDate.days(year: 2024, month: 4, day: 31) == CivilDate.days(year: 2024, month: 5, day: 1))
        #expect(CivilDate.days(year: 2024, month: 2, day: 29) + 1 == CivilDate.days(year: 2024, month: 3, day: 1))
    }
}
