import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

@Suite("Apple's verifyReceipt date text")
struct AppleDateFormatTests {
    @Test("Written as a UTC Gregorian calendar writes it, whole seconds, and read back to the second")
    func matchesTheCalendar() {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        var generator = SeededGenerator(seed: 11)
        // 1900 to 2100, fractions included: the text truncates to the second as the Calendar does.
        let dates =
            (0..<2_000).map { _ in Date(timeIntervalSince1970: Double.random(in: -2_208_988_800...4_102_444_800, using: &generator)) }
            + [Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: -0.5), Date(timeIntervalSince1970: 951_782_400)]
        for date in dates {
            let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
            let expected = String(
                format: "%04d-%02d-%02d %02d:%02d:%02d Etc/GMT", c.year!, c.month!, c.day!, c.hour!, c.minute!, c.second!)
            let text = AppleDateFormat.format(date)
            #expect(text == expected, "\(date.timeIntervalSince1970)")
            #expect(AppleDateFormat.parse(text) == Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down)))
        }
    }
}
