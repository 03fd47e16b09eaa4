/// The proleptic Gregorian calendar as day arithmetic: Howard Hinnant's `days_from_civil` and
/// `civil_from_days` (http://howardhinnant.github.io/date_algorithms.html), exact for every year,
/// with neither a `Calendar` nor a time zone.
///
/// The one copy: Libpq prints and reads `timestamptz` with it and the domain reads and writes
/// receipts' dates with it. It lives in this module, below both, because a façade must not import
/// the domain and the domain must not import a façade (nor FacadeSupport, the façades' queues).
///
/// Years are astronomical: year 0 is 1 BC, year -1 is 2 BC. Unlike Foundation's Gregorian calendar,
/// which is Julian before 1582-10-15, these rules apply to every date, as Postgres's do.
///
/// ```swift
/// CivilDate.days(year: 2000, month: 3, day: 1)  // 11_017
/// CivilDate.fields(days: 11_017)                // (2000, 3, 1)
/// ```
public enum CivilDate {
    /// Days from 1970-01-01 to `year`-`month`-`day` (negative before it).
    ///
    /// - Parameters:
    ///   - year: the astronomical year.
    ///   - month: 1...12.
    ///   - day: 1...31; a day past the month's end counts on into the next month.
    // Inlinable: Libpq calls it for every date of every row it reads.
    @inlinable
    public static func days(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The date `days` days after 1970-01-01 (before it when negative): the inverse of
    /// ``days(year:month:day:)``.
    // Inlinable: Libpq calls it for every date of every row it writes.
    @inlinable
    public static func fields(days: Int) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
