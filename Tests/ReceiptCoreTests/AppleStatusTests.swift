import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

@Suite("Apple status classification")
struct AppleStatusTests {
    @Test(
        "Every documented status maps to its verdict",
        arguments: [
            (0, AppleVerdict.valid), (21006, .valid),
            (21003, .invalid), (21010, .invalid),
            (21004, .configurationError), (21000, .configurationError),
            (21002, .transient), (21001, .transient), (21005, .transient), (21009, .transient),
            (21007, .switchEnvironment(to: .sandbox)),
            (21008, .transient),  // production answering 21008 is nonsense: retry, never loop
            (99999, .transient),
        ])
    func productionVerdicts(status: Int, expected: AppleVerdict) {
        #expect(AppleStatus.verdict(status: status, isRetryable: nil, from: .production) == expected)
    }

    @Test("21008 from the sandbox goes back to production; 21007 from the sandbox is retried, not looped")
    func sandboxFlips() {
        #expect(AppleStatus.verdict(status: 21008, isRetryable: nil, from: .sandbox) == .switchEnvironment(to: .production))
        #expect(AppleStatus.verdict(status: 21007, isRetryable: nil, from: .sandbox) == .transient)
    }

    @Test("21100–21199 follow is_retryable, and retry when Apple does not say", arguments: [21100, 21104, 21199])
    func internalErrors(status: Int) {
        #expect(AppleStatus.verdict(status: status, isRetryable: true, from: .production) == .transient)
        #expect(AppleStatus.verdict(status: status, isRetryable: false, from: .production) == .invalid)
        #expect(AppleStatus.verdict(status: status, isRetryable: nil, from: .production) == .transient)
    }

    @Test("Transport failures and bad HTTP answers are an outage, never an invalid receipt")
    func outage() {
        #expect(AppleStatus.verdictForFailedCall(httpStatus: nil) == .outage)
        #expect(AppleStatus.verdictForFailedCall(httpStatus: 503) == .outage)
        #expect(AppleStatus.verdictForFailedCall(httpStatus: 429) == .outage)
    }
}

@Suite("verifyReceipt responses")
struct VerifyReceiptResponseTests {
    @Test("is_retryable and is-retryable are read as bool or \"0\"/\"1\"")
    func retryableSpellings() throws {
        for (body, expected) in [
            (#"{"status":21104,"is_retryable":true}"#, true), (#"{"status":21104,"is-retryable":"0"}"#, false),
            (#"{"status":21104,"is_retryable":"1"}"#, true), (#"{"status":21104,"is-retryable":false}"#, false),
            (#"{"status":21104}"#, nil),
        ] as [(String, Bool?)] {
            let response = try #require(VerifyReceiptResponse(body: Array(body.utf8)))
            #expect(response.isRetryable == expected, "\(body)")
        }
    }

    @Test("An HTML outage page or garbage is not a response")
    func nonJSON() {
        #expect(VerifyReceiptResponse(body: Array("<html>down</html>".utf8)) == nil)
        #expect(VerifyReceiptResponse(body: Array(#"{"no":"status"}"#.utf8)) == nil)
        #expect(VerifyReceiptResponse(body: []) == nil)
    }

    @Test("Real responses parse: status, and every transaction across in_app and latest_receipt_info", arguments: AppleResponseFiles.names)
    func realResponse(file: String) throws {
        guard let dir = TestEnvironment.appStoreTestData else {
            print("skipped: ../shared/testdata/appstore is absent")
            return
        }
        let data = try Data(contentsOf: dir.appendingPathComponent("responses/\(file)"))
        let raw = try JSONDecoder().decode(JSONValue.self, from: data)
        let response = try #require(VerifyReceiptResponse(body: [UInt8](data)))
        #expect(response.status == raw["status"]?.intValue)
        // Every transaction id Apple listed anywhere appears exactly once.
        var expected = Set<String>()
        for key in ["latest_receipt_info", "latest_expired_receipt_info"] {
            let value = raw[key]
            for item in value?.arrayValue ?? (value?.objectValue != nil ? [value!] : []) {
                if let id = item["transaction_id"]?.stringValue { expected.insert(id) }
            }
        }
        for item in raw["receipt"]?["in_app"]?.arrayValue ?? [] {
            if let id = item["transaction_id"]?.stringValue { expected.insert(id) }
        }
        if raw["receipt"]?["in_app"] == nil, let id = raw["receipt"]?["transaction_id"]?.stringValue { expected.insert(id) }
        let ids = response.transactions.compactMap { $0["transaction_id"]?.stringValue }
        #expect(Set(ids) == expected)
        #expect(ids.count == Set(ids).count)
        // And each becomes a purchase with its dates (ms strings or iOS 6 ms expires_date).
        let purchases = response.transactions.compactMap(InAppPurchase.init(appleJSON:))
        #expect(purchases.count == ids.count)
        for (purchase, json) in zip(purchases, response.transactions) {
            if let ms = json["purchase_date_ms"]?.stringValue.flatMap(Double.init) {
                #expect(purchase.purchaseDate?.timeIntervalSince1970 == ms / 1000)
            }
            if let ms = json["expires_date_ms"]?.stringValue.flatMap(Double.init) {
                #expect(purchase.expiresDate?.timeIntervalSince1970 == ms / 1000)
            }
        }
    }

    @Test("A purchase survives Apple's JSON shape both ways")
    func appleJSONRoundTrip() throws {
        let date = Date(timeIntervalSince1970: 1_700_000_000.123)
        let purchase = InAppPurchase(
            quantity: 2, productID: "p", transactionID: "1", originalTransactionID: "0", purchaseDate: date,
            originalPurchaseDate: date, expiresDate: date.addingTimeInterval(86_400), cancellationDate: date,
            webOrderLineItemID: "77", isTrialPeriod: true, isInIntroOfferPeriod: false)
        let back = try #require(InAppPurchase(appleJSON: purchase.appleJSON))
        #expect(back == purchase)
        #expect(purchase.appleJSON["expires_date"]?.stringValue == "2023-11-15 22:13:20 Etc/GMT")
    }
}
