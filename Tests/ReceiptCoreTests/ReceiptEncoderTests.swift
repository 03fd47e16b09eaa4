import Foundation
import ReceiptCore
import Testing

@Suite("Receipt payload encoder")
struct ReceiptEncoderTests {
    private static func date(_ seconds: TimeInterval) -> Date { Date(timeIntervalSince1970: seconds) }

    /// A receipt exercising every modelled field: consumable, subscription renewals with trial and
    /// intro flags, a refunded purchase, a promotional offer, unknown attributes at both levels.
    static let sample = AppReceipt(
        bundleID: "com.example.receiptq",
        environment: .productionSandbox,
        applicationVersion: "42",
        originalApplicationVersion: "1.0",
        opaqueValue: [0x01, 0x02, 0xFF, 0x00],
        sha1Hash: Array(repeating: 0xAB, count: 20),
        creationDate: date(1_795_257_674),  // 2026-11-21T10:41:14Z
        originalPurchaseDate: date(1_400_000_000),
        expirationDate: date(1_900_000_000),
        inApp: [
            InAppPurchase(
                quantity: 3, productID: "coins.100", transactionID: "1000000000000001",
                originalTransactionID: "1000000000000001", purchaseDate: date(1_700_000_000),
                originalPurchaseDate: date(1_700_000_000), webOrderLineItemID: "0"),
            InAppPurchase(
                productID: "premium.monthly", transactionID: "1000000000000002",
                originalTransactionID: "1000000000000002", purchaseDate: date(1_700_000_100),
                originalPurchaseDate: date(1_700_000_100), expiresDate: date(1_702_592_100),
                webOrderLineItemID: "1000000055555555", isTrialPeriod: true),
            InAppPurchase(
                productID: "premium.monthly", transactionID: "1000000000000003",
                originalTransactionID: "1000000000000002", purchaseDate: date(1_702_592_100),
                originalPurchaseDate: date(1_700_000_100), expiresDate: date(1_705_270_500),
                webOrderLineItemID: "1000000055555556", isInIntroOfferPeriod: true, promotionalOfferID: "winback"),
            InAppPurchase(
                productID: "premium.yearly", transactionID: "1000000000000004",
                originalTransactionID: "1000000000000004", purchaseDate: date(1_705_270_500),
                originalPurchaseDate: date(1_705_270_500), expiresDate: date(1_736_806_500),
                cancellationDate: date(1_706_000_000), webOrderLineItemID: "9223372036854775807",
                unknownAttributes: [ReceiptAttribute(type: 1707, version: 1, value: [0x02, 0x01, 0x03])]),
        ],
        unknownAttributes: [
            ReceiptAttribute(type: 14, version: 1, value: [0x02, 0x01, 0x01]),
            ReceiptAttribute(type: 1, version: 2, value: [0x02, 0x04, 0x3B, 0x21, 0xE3, 0x95]),
        ]
    )

    @Test("encode → decodePayload reproduces the receipt")
    func roundTrip() throws {
        let decoded = try ReceiptDecoder.decodePayload(ReceiptPayloadEncoder.encode(Self.sample))
        #expect(decoded == Self.sample)
        #expect(decoded.inApp.map(\.transactionID) == Self.sample.inApp.map(\.transactionID))
        #expect(decoded.inApp[3].cancellationDate == Self.date(1_706_000_000))
        #expect(decoded.inApp[1].isTrialPeriod && !decoded.inApp[1].isInIntroOfferPeriod)
        #expect(decoded.inApp[2].isInIntroOfferPeriod && decoded.inApp[2].promotionalOfferID == "winback")
    }

    @Test(
        "minimal receipts and odd values round-trip",
        arguments: [
            AppReceipt(bundleID: "a", environment: .production),
            AppReceipt(bundleID: "", environment: ReceiptEnvironment(rawValue: "ProductionVPP"), applicationVersion: ""),
            AppReceipt(
                bundleID: "ünïcødé.app", environment: .xcode,
                inApp: [
                    InAppPurchase(
                        quantity: 0, productID: "", transactionID: "0", originalTransactionID: "",
                        webOrderLineItemID: "0042"),
                    InAppPurchase(
                        quantity: -1, productID: "p", transactionID: "t", originalTransactionID: "o",
                        purchaseDate: Date(timeIntervalSince1970: 1_600_000_000.25), webOrderLineItemID: "-5"),
                ]),
        ])
    func oddRoundTrip(_ receipt: AppReceipt) throws {
        #expect(try ReceiptDecoder.decodePayload(ReceiptPayloadEncoder.encode(receipt)) == receipt)
    }

    @Test("uses Apple's value encodings")
    func appleEncoding() throws {
        let receipt = AppReceipt(
            bundleID: "b", environment: .sandbox, creationDate: Self.date(1_795_257_674),
            inApp: [InAppPurchase(productID: "p", transactionID: "t", originalTransactionID: "t", webOrderLineItemID: "300")])
        let payload = ReceiptPayloadEncoder.encode(receipt)
        let bytes = payload[...]
        // SET of SEQUENCE { INTEGER 0, INTEGER 1, OCTET STRING { UTF8String "Sandbox" } } ...
        #expect(payload.first == 0x31)
        #expect(contains(bytes, [0x30, 0x11, 0x02, 0x01, 0x00, 0x02, 0x01, 0x01, 0x04, 0x09, 0x0C, 0x07] + Array("Sandbox".utf8)))
        #expect(contains(bytes, [0x02, 0x01, 0x02, 0x02, 0x01, 0x01, 0x04, 0x03, 0x0C, 0x01, UInt8(ascii: "b")]))
        // Dates: IA5String RFC 3339, whole seconds.
        #expect(contains(bytes, [0x02, 0x01, 0x0C, 0x02, 0x01, 0x01, 0x04, 0x16, 0x16, 0x14] + Array("2026-11-21T10:41:14Z".utf8)))
        // 1711 web order line item: INTEGER 300; 1713 trial flag: INTEGER 0.
        #expect(contains(bytes, [0x02, 0x02, 0x06, 0xAF, 0x02, 0x01, 0x01, 0x04, 0x04, 0x02, 0x02, 0x01, 0x2C]))
        #expect(contains(bytes, [0x02, 0x02, 0x06, 0xB1, 0x02, 0x01, 0x01, 0x04, 0x03, 0x02, 0x01, 0x00]))
        // Absent expiry (1708): an empty IA5String, as Apple writes for non-subscriptions.
        #expect(contains(bytes, [0x02, 0x02, 0x06, 0xAC, 0x02, 0x01, 0x01, 0x04, 0x02, 0x16, 0x00]))
    }

    @Test("the payload survives a PKCS#7 wrapper")
    func wrapped() throws {
        let payload = ReceiptPayloadEncoder.encode(Self.sample)
        let pkcs7 = Self.pkcs7(wrapping: payload)
        #expect(try ReceiptDecoder.signedContent(ofPKCS7: pkcs7) == payload)
        #expect(try ReceiptDecoder.decode(bytes: pkcs7) == Self.sample)
        #expect(try ReceiptDecoder.decode(base64: Data(pkcs7).base64EncodedString()) == Self.sample)
    }

    @Test("dates with offsets, fractions and empty strings")
    func dates() throws {
        func receipt(creation: String) -> [UInt8] {
            let value = [0x16, UInt8(creation.utf8.count)] + Array(creation.utf8)
            return Self.set([
                Self.attribute(2, [0x0C, 0x01, 0x61]),
                Self.attribute(12, value),
            ])
        }
        #expect(
            try ReceiptDecoder.decodePayload(receipt(creation: "2021-04-03T22:38:45+0300")).creationDate
                == Date(timeIntervalSince1970: 1_617_478_725))
        #expect(
            try ReceiptDecoder.decodePayload(receipt(creation: "2021-04-03T22:38:45+03:00")).creationDate
                == Date(timeIntervalSince1970: 1_617_478_725))
        #expect(
            try ReceiptDecoder.decodePayload(receipt(creation: "2021-04-03T19:38:45.5Z")).creationDate
                == Date(timeIntervalSince1970: 1_617_478_725.5))
        #expect(try ReceiptDecoder.decodePayload(receipt(creation: "")).creationDate == nil)
        #expect(throws: ReceiptDecodingError.malformedPayload) {
            try ReceiptDecoder.decodePayload(receipt(creation: "yesterday"))
        }
        #expect(throws: ReceiptDecodingError.malformedPayload) {
            try ReceiptDecoder.decodePayload(receipt(creation: "2021-13-03T19:38:45Z"))
        }
    }

    @Test("a payload without a bundle id or with a repeated field is malformed")
    func strictness() throws {
        #expect(throws: ReceiptDecodingError.malformedPayload) {
            try ReceiptDecoder.decodePayload(Self.set([Self.attribute(0, [0x0C, 0x01, 0x61])]))
        }
        #expect(throws: ReceiptDecodingError.malformedPayload) {
            try ReceiptDecoder.decodePayload(
                Self.set([Self.attribute(2, [0x0C, 0x01, 0x61]), Self.attribute(2, [0x0C, 0x01, 0x62])]))
        }
        // A bundle id that is not a string.
        #expect(throws: ReceiptDecodingError.malformedPayload) {
            try ReceiptDecoder.decodePayload(Self.set([Self.attribute(2, [0x02, 0x01, 0x01])]))
        }
    }

    // MARK: helpers

    private func contains(_ haystack: ArraySlice<UInt8>, _ needle: [UInt8]) -> Bool {
        guard needle.count <= haystack.count else { return false }
        return haystack.indices.dropLast(needle.count - 1).contains { haystack[$0..<($0 + needle.count)].elementsEqual(needle) }
    }

    static func tlv(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] {
        var length: [UInt8]
        if content.count < 0x80 {
            length = [UInt8(content.count)]
        } else if content.count < 0x100 {
            length = [0x81, UInt8(content.count)]
        } else if content.count < 0x10000 {
            length = [0x82, UInt8(content.count >> 8), UInt8(content.count & 0xFF)]
        } else {
            length = [0x83, UInt8(content.count >> 16), UInt8(content.count >> 8 & 0xFF), UInt8(content.count & 0xFF)]
        }
        return [tag] + length + content
    }

    static func attribute(_ type: Int, _ value: [UInt8], version: UInt8 = 1) -> [UInt8] {
        let typeBytes: [UInt8] = type < 0x80 ? [UInt8(type)] : (type < 0x8000 ? [UInt8(type >> 8), UInt8(type & 0xFF)] : [0])
        return tlv(0x30, tlv(0x02, typeBytes) + tlv(0x02, [version]) + tlv(0x04, value))
    }

    static func set(_ attributes: [[UInt8]]) -> [UInt8] { tlv(0x31, attributes.flatMap { $0 }) }

    /// A minimal unsigned PKCS#7 SignedData around `payload` (no certificates, no signers).
    static func pkcs7(wrapping payload: [UInt8]) -> [UInt8] {
        let signedDataOID: [UInt8] = [0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02]
        let dataOID: [UInt8] = [0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x01]
        let encapsulated = tlv(0x30, dataOID + tlv(0xA0, tlv(0x04, payload)))
        let signedData = tlv(0x30, tlv(0x02, [1]) + tlv(0x31, []) + encapsulated + tlv(0x31, []))
        return tlv(0x30, signedDataOID + tlv(0xA0, signedData))
    }
}
