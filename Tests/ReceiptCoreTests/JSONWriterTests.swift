import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

/// The hand-written JSON of the hot path must say exactly what `JSONEncoder` said before it.
@Suite("JSON writer: the receipt resource and timestamps, as JSONEncoder wrote them")
struct JSONWriterTests {
    @Test("Random resources: the writer's JSON decodes to the same resource and the same JSON tree as JSONEncoder's")
    func resources() throws {
        var generator = SeededGenerator(seed: 42)
        let awkward = ["", "plain", "quote\"back\\slash", "new\nline\ttab\r", "\u{01}\u{1F}", "日本語 ✓", "</script>", "a/b"]
        for _ in 0..<300 {
            func text() -> String? { Bool.random(using: &generator) ? awkward.randomElement(using: &generator) : nil }
            func date() -> Date { Date(timeIntervalSince1970: Double.random(in: -2e9...5e9, using: &generator).rounded()) }
            var submission = Submission()
            submission.userIdentifier = text()
            submission.countryCode = text()
            submission.ipAddress = text()
            if Bool.random(using: &generator) {
                submission.metadata = .object([
                    "n": .number(Double(Int.random(in: -1000...1000, using: &generator)) / 8), "big": .number(1e300),
                    "s": .string(awkward.randomElement(using: &generator)!), "z": .null, "a": .array([.bool(true), .object([:])]),
                ])
            }
            let purchases = (0..<Int.random(in: 0...3, using: &generator)).map { index in
                var purchase = InAppPurchase(
                    quantity: index + 1, productID: "p\(index)", transactionID: "\(index)", originalTransactionID: "o\(index)")
                purchase.purchaseDate = date()
                purchase.expiresDate = Bool.random(using: &generator) ? date() : nil
                purchase.webOrderLineItemID = text()
                purchase.isTrialPeriod = Bool.random(using: &generator)
                return InAppPurchaseResource(purchase, isConflict: Bool.random(using: &generator), environment: text())
            }
            let resource = ReceiptResource(
                id: UUID(), style: Bool.random(using: &generator) ? .unified : nil, appFamilyID: UUID(), bundleID: text(),
                isFraud: Bool.random(using: &generator), fraudReason: text(), environment: text(), submission: submission,
                validationStatus: [.pending, .valid, .fraud].randomElement(using: &generator)!,
                appleStatus: Bool.random(using: &generator) ? 21_007 : nil, inAppPurchases: purchases, createdAt: date(),
                updatedAt: date())
            let written = resource.encoded()
            #expect(try ReceiptResource.decode(written) == resource)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            let reference = canonicalUUIDs(try JSONDecoder().decode(JSONValue.self, from: encoder.encode(resource)))
            #expect(try JSONDecoder().decode(JSONValue.self, from: Data(written)) == reference)
        }
    }

    @Test("Random job envelopes: written bytes decode to the same envelope and the same JSON tree as JSONEncoder's")
    func envelopes() throws {
        var generator = SeededGenerator(seed: 99)
        for _ in 0..<300 {
            let envelope = JobEnvelopeDecodeTests.randomEnvelope(using: &generator)
            let written = envelope.encoded()
            let decoded = try JobEnvelope.decode(written)
            #expect(decoded.id == envelope.id && decoded.payload == envelope.payload && decoded.history == envelope.history)
            #expect(decoded.replyTo == envelope.replyTo)
            #expect(abs(decoded.enqueuedAt.timeIntervalSince(envelope.enqueuedAt)) < 0.000_001)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            encoder.dateEncodingStrategy = .millisecondsSince1970
            let reference = canonicalUUIDs(try JSONDecoder().decode(JSONValue.self, from: encoder.encode(envelope)))
            #expect(try JSONDecoder().decode(JSONValue.self, from: Data(written)) == reference)
        }
    }

    @Test("A quote, backslash or control byte at any offset of a string of any length is escaped (the 8-byte scan and its tail)")
    func escapesAtEveryOffset() throws {
        let specials: [Character] = ["\"", "\\", "\n", "\u{00}", "\u{1F}", "\t"]
        // Near-misses of the scan's byte tests: the characters either side of each special.
        let fillers: [Character] = ["!", "#", "]", "é", "\u{7F}"]
        // Two 8-byte words and a tail: every offset of the scan's word and tail paths.
        for length in 0..<20 {
            for filler in fillers {
                let plain = String(repeating: filler, count: length)
                try #expect(roundTrip(plain) == plain)
                for offset in 0..<length {
                    for special in specials {
                        var characters = Array(plain)
                        characters[offset] = special
                        let text = String(characters)
                        try #expect(roundTrip(text) == text, "length \(length), offset \(offset)")
                    }
                }
            }
        }
    }

    /// The string written as a JSON value and read back by the strict one-pass reader (kept cheap:
    /// the test runs as a debug build beside the in-process systems); a raw quote or control byte
    /// fails the read.
    private func roundTrip(_ text: String) throws -> String {
        var writer = JSONWriter()
        writer.value(.string(text))
        #expect(!writer.bytes.contains { $0 < 0x20 })
        return try #require(try JSONValue.parse(writer.bytes).stringValue)
    }

    @Test("Timestamps: the arithmetic UTC format matches a Gregorian calendar, before 1970 and after 2038 too")
    func timestamps() {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        var generator = SeededGenerator(seed: 7)
        let fixed: [Double] = [0, -1, 86_399, 86_400, 951_782_400, 1_519_641_347.834, 2_147_483_648, -2_208_988_800, 4_102_444_800]
        for seconds in fixed + (0..<2_000).map({ _ in Double.random(in: -5e9...1e10, using: &generator) }) {
            let date = Date(timeIntervalSince1970: seconds)
            let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
            let expected = String(
                format: "%04d-%02d-%02d %02d:%02d:%02d UTC", c.year!, c.month!, c.day!, c.hour!, c.minute!, c.second!)
            #expect(APITimestamp(date).utc == expected, "\(seconds)")
        }
        #expect(APITimestamp(Date(timeIntervalSince1970: 1_519_641_347.834)).utc == "2018-02-26 10:35:47 UTC")
        // A nonsense date from an answer (`*_ms` of 1e300) is clamped, never a trap.
        #expect(APITimestamp(Date(timeIntervalSince1970: 1e300)).utc == "9999-12-31 23:59:59 UTC")
        #expect(APITimestamp(Date(timeIntervalSince1970: -1e300)).utc == "0001-01-01 00:00:00 UTC")
    }
}

/// `JSONEncoder` writes a `UUID` in upper case; receiptq prints the canonical lower case (RFC 9562).
private func canonicalUUIDs(_ value: JSONValue) -> JSONValue {
    switch value {
    case .string(let text) where UUID(uuidString: text) != nil: .string(text.lowercased())
    case .array(let items): .array(items.map(canonicalUUIDs))
    case .object(let members): .object(members.mapValues(canonicalUUIDs))
    default: value
    }
}
