import BaseSupport

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Text (and binary) conversions for `timestamptz`, done by hand: the civil-date arithmetic
/// (``CivilDate``) is exact, and needs neither a formatter nor the process's time zone.
enum PostgresTimestamp {
    /// `yyyy-MM-ddTHH:mm:ss.SSSZ` in UTC, rounded to the nearest millisecond; `infinity` beyond the
    /// year 9999 and `-infinity` before the year 1 or for a date that is not a number.
    static func format(_ date: Date) -> String {
        let totalMilliseconds: Int64
        switch stored(date) {
        case .infinity: return "infinity"
        case .minusInfinity: return "-infinity"
        case .milliseconds(let value): totalMilliseconds = value
        }
        let (days, dayMilliseconds) = floorDivide(totalMilliseconds, 86_400_000)
        let (year, month, day) = CivilDate.fields(days: Int(days))
        let hour = dayMilliseconds / 3_600_000
        let minute = dayMilliseconds / 60_000 % 60
        let second = dayMilliseconds / 1000 % 60
        let millisecond = dayMilliseconds % 1000
        // Digit by digit into 24 bytes: a worker prints every date of every row it stores, and the
        // interpolated form (a String per field) was 2 % of its CPU.
        return String(unsafeUninitializedCapacity: 24) { text in
            func put(_ value: Int64, width: Int, at start: Int) {
                var rest = value
                for index in stride(from: start + width - 1, through: start, by: -1) {
                    text[index] = UInt8(ascii: "0") + UInt8(rest % 10)
                    rest /= 10
                }
            }
            put(Int64(year), width: 4, at: 0)
            put(Int64(month), width: 2, at: 5)
            put(Int64(day), width: 2, at: 8)
            put(hour, width: 2, at: 11)
            put(minute, width: 2, at: 14)
            put(second, width: 2, at: 17)
            put(millisecond, width: 3, at: 20)
            (text[4], text[7], text[10]) = (UInt8(ascii: "-"), UInt8(ascii: "-"), UInt8(ascii: "T"))
            (text[13], text[16], text[19], text[23]) = (UInt8(ascii: ":"), UInt8(ascii: ":"), UInt8(ascii: "."), UInt8(ascii: "Z"))
            return 24
        }
    }

    /// What a date is stored as: the millisecond nearest to it, or an infinity.
    enum Stored: Equatable {
        /// Milliseconds since 1970-01-01T00:00:00Z.
        case milliseconds(Int64)
        case infinity
        case minusInfinity
    }

    /// The date rounded to the nearest millisecond; `infinity` beyond the year 9999, `-infinity`
    /// before the year 1 or for a date that is not a number.
    ///
    /// A nonsense date (`1e300` where an answer has milliseconds) would trap the integer
    /// conversion and with it the worker, every time the job is retried: Postgres gets ±infinity,
    /// which reads back as `Date.distantFuture`/`distantPast`.
    static func stored(_ date: Date) -> Stored {
        let rounded = (date.timeIntervalSince1970 * 1000).rounded()
        guard rounded >= -62_135_596_800_000, rounded < 253_402_300_800_000 else { return rounded > 0 ? .infinity : .minusInfinity }
        return .milliseconds(Int64(rounded))
    }

    /// `timestamptz` in binary format: microseconds since 2000-01-01T00:00:00Z, the same instant
    /// ``format(_:)`` prints (so either format stores the same value); the infinities are
    /// Postgres's `DT_NOEND` and `DT_NOBEGIN`.
    static func binary(_ date: Date) -> Int64 {
        switch stored(date) {
        case .infinity: Int64.max
        case .minusInfinity: Int64.min
        case .milliseconds(let value): (value - 946_684_800_000) * 1000
        }
    }

    /// Parses PostgreSQL's ISO output: `2026-11-21 10:41:14.123+00`, with optional fraction,
    /// an optional `±HH[:MM[:SS]]` offset (absent for `timestamp` and `date`: read as UTC), and
    /// `T` accepted in place of the space. `infinity`/`-infinity` map to `Date.distantFuture`/`distantPast`.
    /// Returns `nil` for anything else, including BC dates.
    static func parse(_ text: String) -> Date? {
        switch text {
        case "infinity": return .distantFuture
        case "-infinity": return .distantPast
        default: break
        }
        var scanner = Scanner(Array(text.utf8))
        guard let year = scanner.number(minDigits: 4, maxDigits: 7), scanner.skip("-"),
            let month = scanner.number(minDigits: 2, maxDigits: 2), scanner.skip("-"),
            let day = scanner.number(minDigits: 2, maxDigits: 2),
            (1...12).contains(month), (1...31).contains(day)
        else { return nil }
        var seconds = Double(CivilDate.days(year: year, month: month, day: day)) * 86_400
        if scanner.skip(" ") || scanner.skip("T") {
            guard let hour = scanner.number(minDigits: 2, maxDigits: 2), scanner.skip(":"),
                let minute = scanner.number(minDigits: 2, maxDigits: 2), scanner.skip(":"),
                let second = scanner.number(minDigits: 2, maxDigits: 2),
                hour <= 24, minute < 60, second <= 60
            else { return nil }
            var fraction = 0.0
            if scanner.skip(".") {
                guard let digits = scanner.digits(maxDigits: 9) else { return nil }
                fraction = Double(digits.value) / pow10(digits.count)
            }
            seconds += Double(hour * 3600 + minute * 60 + second) + fraction
            if let sign = scanner.sign() {
                guard let offsetHours = scanner.number(minDigits: 2, maxDigits: 2) else { return nil }
                var offset = offsetHours * 3600
                if scanner.skip(":") {
                    guard let offsetMinutes = scanner.number(minDigits: 2, maxDigits: 2) else { return nil }
                    offset += offsetMinutes * 60
                    if scanner.skip(":") {
                        guard let offsetSeconds = scanner.number(minDigits: 2, maxDigits: 2) else { return nil }
                        offset += offsetSeconds
                    }
                }
                // The text is local time at that offset; UTC = local − offset.
                seconds -= Double(sign * offset)
            }
        }
        guard scanner.isAtEnd else { return nil }
        return Date(timeIntervalSince1970: seconds)
    }

    private static func floorDivide(_ value: Int64, _ divisor: Int64) -> (quotient: Int64, remainder: Int64) {
        let quotient = value >= 0 ? value / divisor : (value - divisor + 1) / divisor
        return (quotient, value - quotient * divisor)
    }

    private static func pow10(_ exponent: Int) -> Double {
        (0..<exponent).reduce(1.0) { value, _ in value * 10 }
    }

    /// A cursor over ASCII bytes.
    private struct Scanner {
        let bytes: [UInt8]
        var index = 0

        init(_ bytes: [UInt8]) { self.bytes = bytes }

        var isAtEnd: Bool { index == bytes.count }

        mutating func skip(_ character: Unicode.Scalar) -> Bool {
            guard index < bytes.count, bytes[index] == UInt8(ascii: character) else { return false }
            index += 1
            return true
        }

        mutating func sign() -> Int? {
            if skip("+") { return 1 }
            if skip("-") { return -1 }
            return nil
        }

        mutating func digits(maxDigits: Int) -> (value: Int, count: Int)? {
            var value = 0
            var count = 0
            while index < bytes.count, count < maxDigits, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                value = value * 10 + Int(bytes[index] - UInt8(ascii: "0"))
                count += 1
                index += 1
            }
            // Digits beyond the precision a Date can hold are skipped, not rejected.
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            return count == 0 ? nil : (value, count)
        }

        mutating func number(minDigits: Int, maxDigits: Int) -> Int? {
            let start = index
            var value = 0
            while index < bytes.count, index - start < maxDigits, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                value = value * 10 + Int(bytes[index] - UInt8(ascii: "0"))
                index += 1
            }
            return index - start >= minDigits ? value : nil
        }
    }
}
