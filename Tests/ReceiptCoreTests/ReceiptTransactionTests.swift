import Foundation
import ReceiptCore
import Testing

@Suite("iOS 6 transaction receipts")
struct ReceiptTransactionTests {
    static let fields: [String: String] = [
        "bid": "com.example.legacy",
        "bvrs": "2.1",
        "product-id": "legacy.sub.monthly",
        "transaction-id": "1000000000000777",
        "original-transaction-id": "1000000000000700",
        "quantity": "2",
        "purchase-date-ms": "1354432554000",
        "purchase-date": "2012-12-02 07:15:54 Etc/GMT",
        "original-purchase-date-ms": "1354432000123",
        "expires-date": "1354436154000",
        "web-order-line-item-id": "1000000026436290",
        "unique-identifier": "0000b0092818",
        "weird \"key\"": "line1\nline2 \\ \"quoted\"",
    ]

    @Test("forge → decode round trip", arguments: ["Sandbox", "Production"])
    func forge(_ environment: String) throws {
        let signature = [UInt8](repeating: 0x5A, count: 128)
        let certificate: [UInt8] = [0x30, 0x03, 0x02, 0x01, 0x01]
        let blob = TransactionReceiptCodec.signatureBlob(version: 2, signature: signature, certificate: certificate)
        #expect(blob.count == 1 + 128 + 4 + 5)
        #expect(Array(blob[129..<133]) == [0, 0, 0, 5])
        let bytes = TransactionReceiptCodec.encode(environment: environment, purchaseInfo: Self.fields, signatureBlob: blob)
        #expect(bytes.first == UInt8(ascii: "{"))

        let receipt = try ReceiptDecoder.decode(base64: Data(bytes).base64EncodedString())
        #expect(receipt.style == .transaction)
        #expect(receipt.environment.rawValue == environment)
        #expect(receipt.environment.isSandbox == (environment == "Sandbox"))
        #expect(receipt.bundleID == "com.example.legacy")
        #expect(receipt.applicationVersion == "2.1")
        #expect(receipt.transactionInfo == Self.fields)
        #expect(receipt.transactionSignature == blob)
        let purchaseInfo = try #require(receipt.transactionPurchaseInfo)
        #expect(purchaseInfo == TransactionReceiptCodec.encodePurchaseInfo(Self.fields))
        #expect(TransactionReceiptCodec.signedBytes(version: 2, purchaseInfo: purchaseInfo).first == 2)

        let purchase = try #require(receipt.inApp.first)
        #expect(purchase.quantity == 2)
        #expect(purchase.productID == "legacy.sub.monthly")
        #expect(purchase.transactionID == "1000000000000777")
        #expect(purchase.originalTransactionID == "1000000000000700")
        #expect(purchase.purchaseDate == Date(timeIntervalSince1970: 1_354_432_554))
        #expect(purchase.originalPurchaseDate == Date(timeIntervalSince1970: 1_354_432_000.123))
        #expect(purchase.expiresDate == Date(timeIntervalSince1970: 1_354_436_154))
        #expect(purchase.webOrderLineItemID == "1000000026436290")
        #expect(purchase.cancellationDate == nil)

        let parts = try #require(TransactionReceiptCodec.parseSignatureBlob(blob))
        #expect(parts.version == 2 && parts.signature == signature && parts.certificate == certificate)
    }

    @Test("signature blobs: version 3 uses 256-byte signatures; bad layouts are nil")
    func signatureBlobs() throws {
        let certificate: [UInt8] = Array(repeating: 0x30, count: 300)
        let v3 = TransactionReceiptCodec.signatureBlob(version: 3, signature: Array(repeating: 1, count: 256), certificate: certificate)
        let parts = try #require(TransactionReceiptCodec.parseSignatureBlob(v3))
        #expect(parts.signature.count == 256 && parts.certificate == certificate)
        #expect(TransactionReceiptCodec.parseSignatureBlob([]) == nil)
        #expect(TransactionReceiptCodec.parseSignatureBlob([2]) == nil)
        #expect(TransactionReceiptCodec.parseSignatureBlob(Array(v3.dropLast())) == nil)
        // Version 2 declared but laid out for 256 bytes: refused, not guessed.
        #expect(TransactionReceiptCodec.parseSignatureBlob([2] + Array(v3.dropFirst())) == nil)
    }

    @Test("the formatted date is used when milliseconds are missing")
    func formattedDates() throws {
        let info = TransactionReceiptCodec.encodePurchaseInfo([
            "bid": "b", "transaction-id": "1", "product-id": "p",
            "purchase-date": "2012-12-02 07:15:54 Etc/GMT",
        ])
        let outer = "{\"purchase-info\" = \"\(Data(info).base64EncodedString())\";}"
        let receipt = try TransactionReceiptCodec.decode(Array(outer.utf8))
        #expect(receipt.inApp.first?.purchaseDate == Date(timeIntervalSince1970: 1_354_432_554))
        #expect(receipt.environment == .production)
        #expect(receipt.transactionSignature == nil)
        #expect(receipt.inApp.first?.quantity == 1)
    }

    @Test("old-style plist syntax Apple's writers vary in")
    func plistSyntax() throws {
        let inner = #"""
            // comment
            { bid = com.example.app; /* block */ "product-id" = 'p\'1'; "transaction-id" = "1\U00e9\101";
              nested = { a = b; }; list = (1, "2"); blob = <0fAB>; "bvrs" = "1.0" }
            """#
        let outer = "  {\"purchase-info\"=\"\(Data(inner.utf8).base64EncodedString())\"; environment = Sandbox}\0"
        let receipt = try ReceiptDecoder.decode(bytes: Array(outer.utf8))
        #expect(receipt.bundleID == "com.example.app")
        #expect(receipt.inApp.first?.productID == "p'1")
        #expect(receipt.inApp.first?.transactionID == "1éA")
        #expect(receipt.applicationVersion == "1.0")
        #expect(receipt.environment == .sandbox)
        // Only string values are kept.
        #expect(receipt.transactionInfo?["nested"] == nil)
    }

    @Test(
        "malformed transaction receipts",
        arguments: [
            "{",
            "{}",  // no purchase-info
            "{ \"purchase-info\" = \"!!!\"; }",  // not base64
            "{ \"purchase-info\" = \"e30=\"; \"signature\" = \"*\"; }",  // signature not base64
            "{ \"purchase-info\" = \"bm90IGEgcGxpc3Q=\"; }",  // "not a plist"
            "{ \"a\" = \"1\"; \"a\" = \"2\"; \"purchase-info\" = \"e30=\"; }",  // duplicate key
            "{ \"purchase-info\" = \"e30=\"; } trailing",
            "{ \"purchase-info\" \"e30=\"; }",
            "{ \"purchase-info\" = \"e30=\" \"x\" = \"y\"; }",
            "{ \"purchase-info\" = \"unterminated; }",
            "{ \"purchase-info\" = \"e30=\"; " + String(repeating: "x = {", count: 40) + " }",
            "{ hello world }",
        ])
    func malformed(_ text: String) {
        #expect(throws: ReceiptDecodingError.malformedTransactionReceipt) {
            try ReceiptDecoder.decode(bytes: Array(text.utf8))
        }
    }
}
