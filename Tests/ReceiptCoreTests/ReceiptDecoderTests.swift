import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

/// Every receipt of the shared corpus against EXPECTED.json (an independent OpenSSL + DER decoder).
@Suite("Receipt decoder: real receipts vs EXPECTED.json")
struct ReceiptDecoderTests {
    @Test("corpus is present and complete", .enabled(if: ReceiptTestData.available, Comment(rawValue: ReceiptTestData.skipMessage)))
    func corpusMatchesExpected() throws {
        let expected = try ReceiptTestData.expected()
        let names = Set(ReceiptTestData.receiptNames.map { "receipts/\($0)" })
        #expect(names == Set(expected.keys), "EXPECTED.json and receipts/*.b64 list different files")
        #expect(names.count >= 33)
    }

    @Test(
        "decodes like EXPECTED.json",
        .enabled(if: ReceiptTestData.available, Comment(rawValue: ReceiptTestData.skipMessage)),
        arguments: ReceiptTestData.receiptNames
    )
    func receipt(_ name: String) throws {
        let entry = try #require(try ReceiptTestData.expected()["receipts/\(name)"], "\(name) missing from EXPECTED.json")
        let receipt = try ReceiptDecoder.decode(base64: ReceiptTestData.base64(name))
        #expect(receipt.environment.rawValue == entry["environment"] as? String)
        switch entry["kind"] as? String {
        case "unified":
            try checkUnified(receipt, entry)
        case "transaction":
            try checkTransaction(receipt, entry)
        default:
            Issue.record("unknown kind in EXPECTED.json for \(name)")
        }
    }

    private func checkUnified(_ receipt: AppReceipt, _ entry: [String: Any]) throws {
        #expect(receipt.style == .unified)
        #expect(receipt.bundleID == entry["bundle_id"] as? String)
        #expect(receipt.applicationVersion == entry["application_version"] as? String)
        #expect(receipt.originalApplicationVersion == entry["original_application_version"] as? String)
        let created = try #require(entry["receipt_creation_date"] as? String)
        #expect(receipt.creationDate == ReceiptTestData.date(created), "creation date \(created)")
        #expect(receipt.transactionInfo == nil && receipt.transactionSignature == nil)

        let expectedInApp = try #require(entry["in_app"] as? [[String: Any]])
        #expect(receipt.inApp.count == entry["in_app_count"] as? Int)
        try #require(receipt.inApp.count == expectedInApp.count)
        for (index, (purchase, fields)) in zip(receipt.inApp, expectedInApp).enumerated() {
            let label = Comment(rawValue: "in_app[\(index)]")
            #expect(purchase.quantity == fields["quantity"] as? Int, label)
            #expect(purchase.productID == fields["product_id"] as? String, label)
            #expect(purchase.transactionID == fields["transaction_id"] as? String, label)
            // Xcode receipts carry no original transaction id: the model keeps it empty.
            #expect(purchase.originalTransactionID == (fields["original_transaction_id"] as? String ?? ""), label)
            #expect(purchase.purchaseDate == (fields["purchase_date"] as? String).flatMap(ReceiptTestData.date), label)
            #expect(
                purchase.originalPurchaseDate == (fields["original_purchase_date"] as? String).flatMap(ReceiptTestData.date),
                label)
            #expect(purchase.expiresDate == (fields["expires_date"] as? String).flatMap(ReceiptTestData.date), label)
            #expect(
                purchase.cancellationDate == (fields["cancellation_date"] as? String).flatMap(ReceiptTestData.date), label)
            #expect(purchase.webOrderLineItemID == (fields["web_order_line_item_id"] as? Int).map(String.init), label)
            #expect(purchase.isTrialPeriod == ((fields["is_trial_period"] as? Int ?? 0) != 0), label)
            #expect(purchase.isInIntroOfferPeriod == ((fields["is_in_intro_offer_period"] as? Int ?? 0) != 0), label)
            // Dates in EXPECTED.json must have parsed, or the comparisons above prove little.
            #expect((fields["purchase_date"] as? String).flatMap(ReceiptTestData.date) != nil, label)
        }

        // Re-encoding the decoded receipt and decoding again changes nothing.
        let reencoded = try ReceiptDecoder.decodePayload(ReceiptPayloadEncoder.encode(receipt))
        #expect(reencoded == receipt)
    }

    private func checkTransaction(_ receipt: AppReceipt, _ entry: [String: Any]) throws {
        #expect(receipt.style == .transaction)
        let info = try #require(entry["purchase_info"] as? [String: String])
        #expect(receipt.transactionInfo == info)
        #expect(receipt.bundleID == info["bid"])
        #expect(receipt.applicationVersion == info["bvrs"])
        let purchase = try #require(receipt.inApp.first)
        #expect(receipt.inApp.count == 1)
        #expect(purchase.productID == info["product-id"])
        #expect(purchase.transactionID == info["transaction-id"])
        #expect(purchase.originalTransactionID == info["original-transaction-id"])
        #expect(purchase.quantity == Int(info["quantity"] ?? ""))
        #expect(purchase.webOrderLineItemID == info["web-order-line-item-id"])
        #expect(purchase.purchaseDate == millis(info["purchase-date-ms"]))
        #expect(purchase.originalPurchaseDate == millis(info["original-purchase-date-ms"]))
        #expect(purchase.expiresDate == millis(info["expires-date"]))
        if let formatted = info["purchase-date"] {
            // The readable twin agrees with the milliseconds to the second.
            let readable = try #require(
                ReceiptTestData.date(
                    formatted.replacingOccurrences(of: " Etc/GMT", with: "Z")
                        .replacingOccurrences(of: " ", with: "T")))
            #expect(abs(try #require(purchase.purchaseDate).timeIntervalSince(readable)) < 1)
        }

        // SOURCES.md: signature = version 2 ‖ 128-byte RSA signature ‖ 4-byte length ‖ DER certificate.
        let blob = try #require(receipt.transactionSignature)
        let parts = try #require(TransactionReceiptCodec.parseSignatureBlob(blob))
        #expect(parts.version == 2)
        #expect(parts.signature.count == 128)
        #expect(parts.certificate.first == 0x30)
        #expect(
            TransactionReceiptCodec.signatureBlob(
                version: parts.version, signature: parts.signature,
                certificate: parts.certificate) == blob)
        let purchaseInfo = try #require(receipt.transactionPurchaseInfo)
        #expect(TransactionReceiptCodec.signedBytes(version: 2, purchaseInfo: purchaseInfo) == [2] + purchaseInfo)

        // Re-encoding with the original purchase-info bytes reproduces the receipt.
        let rebuilt = TransactionReceiptCodec.encode(
            environment: receipt.environment.rawValue, purchaseInfoBytes: purchaseInfo, signatureBlob: blob)
        #expect(try ReceiptDecoder.decode(bytes: rebuilt) == receipt)
    }

    private func millis(_ text: String?) -> Date? {
        text.flatMap(Int64.init).map { Date(timeIntervalSince1970: Double($0) / 1000) }
    }

    @Test(
        "BER indefinite-length receipts yield their payload",
        .enabled(if: ReceiptTestData.available, Comment(rawValue: ReceiptTestData.skipMessage))
    )
    func berIndefiniteLength() throws {
        let expected = try ReceiptTestData.expected()
        let berNames = expected.filter { $0.value["ber_indefinite_length"] as? Bool == true }.keys.sorted()
        #expect(berNames.count >= 4)
        for key in berNames {
            let bytes = try ReceiptTestData.bytes(String(key.dropFirst("receipts/".count)))
            #expect(bytes[1] == 0x80, "\(key) should start with an indefinite length")
            let payload = try ReceiptDecoder.signedContent(ofPKCS7: bytes)
            #expect(payload.first == 0x31)
        }
    }
}

// MARK: - Shared helpers of the Receipt*Tests files
/// The shared App Store corpus (`../shared/testdata/appstore`), read in place, never copied.
enum ReceiptTestData {
    static let skipMessage = "shared App Store test data (../shared/testdata/appstore or RECEIPTQ_TESTDATA) is absent"

    static var available: Bool { TestEnvironment.appStoreTestData != nil }

    /// File names of `receipts/*.b64`, sorted; empty when the corpus is absent.
    static var receiptNames: [String] {
        guard let root = TestEnvironment.appStoreTestData else { return [] }
        let folder = root.appendingPathComponent("receipts")
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        return names.filter { $0.hasSuffix(".b64") }.sorted()
    }

    static func base64(_ name: String) throws -> String {
        let root = try #require(TestEnvironment.appStoreTestData)
        return try String(contentsOf: root.appendingPathComponent("receipts/\(name)"), encoding: .utf8)
    }

    static func bytes(_ name: String) throws -> [UInt8] {
        let text = try base64(name).filter { !$0.isWhitespace }
        return try #require(Data(base64Encoded: text).map(Array.init), "\(name) is not strict base64")
    }

    /// EXPECTED.json: file key (`receipts/<name>`) → the independent decoder's values.
    static func expected() throws -> [String: [String: Any]] {
        let root = try #require(TestEnvironment.appStoreTestData)
        let data = try Data(contentsOf: root.appendingPathComponent("EXPECTED.json"))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: [String: Any]])
    }

    /// ISO 8601 via Foundation, independent of the decoder's own date parser. Accepts `Z`, `+03:00` and `+0300`.
    static func date(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withFullDate, .withTime, .withDashSeparatorInDate, .withColonSeparatorInTime, .withTimeZone]
        return formatter.date(from: text)
    }
}

/// Deterministic generator, so a fuzz failure can be replayed.
struct ReceiptFuzzRNG: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
