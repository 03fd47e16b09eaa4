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

    @Test("A field's date: milliseconds first, then the text as milliseconds or Apple's date; a number that is not finite is none")
    func readsAFieldsDate() {
        let at = Date(timeIntervalSince1970: 1_519_641_347.834)
        let object: (String?, String?) -> JSONValue = { ms, text in
            var fields: [String: JSONValue] = [:]
            fields["expires_date_ms"] = ms.map(JSONValue.string)
            fields["expires_date"] = text.map(JSONValue.string)
            return .object(fields)
        }
        #expect(AppleDateFormat.date(object("1519641347834", "garbage"), "expires_date") == at)
        #expect(AppleDateFormat.date(object(nil, "1519641347834"), "expires_date") == at)
        #expect(AppleDateFormat.date(object(nil, "2018-02-26 10:35:47 Etc/GMT"), "expires_date") == Date(timeIntervalSince1970: 1_519_641_347))
        for number in ["nan", "inf", "-infinity"] {
            #expect(AppleDateFormat.date(object(number, nil), "expires_date") == nil, "\(number)")
            #expect(AppleDateFormat.date(object(nil, number), "expires_date") == nil, "\(number)")
            #expect(AppleDateFormat.date(object(number, "1519641347834"), "expires_date") == at, "\(number)")
        }
        let purchase = InAppPurchase(
            appleJSON: .object([
                "transaction_id": .string("1"), "product_id": .string("p"), "purchase_date_ms": .string("nan"),
                "expires_date_ms": .string("inf"),
            ]))
        #expect(purchase?.purchaseDate == nil)
        #expect(purchase?.expiresDate == nil)
    }
}
