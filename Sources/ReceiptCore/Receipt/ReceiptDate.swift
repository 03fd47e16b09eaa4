import BaseSupport
import Foundation

/// The date strings of receipt payloads: RFC 3339 in IA5String, e.g. `2015-08-07T20:37:55Z`.
///
/// Parsed by hand rather than with a formatter: formatters are slow, locale-sensitive, and this
/// runs on untrusted input in a hot path. Accepts fractional seconds and `±hh:mm` / `±hhmm` offsets
/// (Xcode receipts write `+0300`).
enum ReceiptDate {
    static func parse(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        var index = 0

        func digits(_ count: Int) -> Int? {
            guard index + count <= bytes.count else { return nil }
            var value = 0
            for offset in 0..<count {
                let byte = bytes[index + offset]
                guard byte >= 0x30, byte <= 0x39 else { return nil }
                value = value * 10 + Int(byte - 0x30)
            }
            index += count
            return value
        }
        func expect(_ characters: String) -> Bool {
            guard index < bytes.count, characters.utf8.contains(bytes[index]) else { return false }
            index += 1
            return true
        }

        guard let year = digits(4), expect("-"), let month = digits(2), expect("-"), let day = digits(2),
            expect("Tt "), let hour = digits(2), expect(":"), let minute = digits(2), expect(":"),
            let second = digits(2)
        else { return nil }
        guard (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }

        var fraction = 0.0
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            var scale = 0.1
            var sawDigit = false
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 {
                fraction += Double(bytes[index] - 0x30) * scale
                scale /= 10
                sawDigit = true
                index += 1
            }
            guard sawDigit else { return nil }
        }

        var offsetSeconds = 0
        guard index < bytes.count else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            index += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            let sign = bytes[index] == UInt8(ascii: "-") ? -1 : 1
            index += 1
            guard let offsetHours = digits(2) else { return nil }
            if index < bytes.count, bytes[index] == UInt8(ascii: ":") { index += 1 }
            guard let offsetMinutes = digits(2), offsetHours < 24, offsetMinutes < 60 else { return nil }
            offsetSeconds = sign * (offsetHours * 3600 + offsetMinutes * 60)
        default:
            return nil
        }
        guard index == bytes.count else { return nil }

        let days = CivilDate.days(year: year, month: month, day: day)
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offsetSeconds
        return Date(timeIntervalSince1970: Double(seconds) + fraction)
    }

    /// `YYYY-MM-DDThh:mm:ssZ`, as Apple writes it; milliseconds only when the date has them.
    static func format(_ date: Date) -> String {
        let interval = clampedInterval(date)
        var seconds = Int(interval.rounded(.down))
        var millis = Int(((interval - Double(seconds)) * 1000).rounded())
        if millis == 1000 {
            seconds += 1
            millis = 0
        }
        let utc = utcFields(seconds)
        var text = pad(utc.year, 4) + "-" + pad(utc.month, 2) + "-" + pad(utc.day, 2) + "T"
        text += pad(utc.hour, 2) + ":" + pad(utc.minute, 2) + ":" + pad(utc.second, 2)
        if millis != 0 { text += "." + pad(millis, 3) }
        return text + "Z"
    }

    /// Seconds since 1970, clamped to years 0001...9999 so that a nonsense date (say, a millisecond
    /// value of 1e300 in an answer) cannot trap an integer conversion.
    static func clampedInterval(_ date: Date) -> Double {
        min(max(date.timeIntervalSince1970, -62_135_596_800), 253_402_300_799)
    }

    /// The UTC calendar fields of a whole second since 1970 (in the clamped range).
    static func utcFields(_ seconds: Int) -> (year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) {
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = CivilDate.fields(days: days)
        return (year, month, day, secondOfDay / 3600, secondOfDay / 60 % 60, secondOfDay % 60)
    }

    private static func pad(_ value: Int, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }
}
