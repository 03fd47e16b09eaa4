import Foundation

/// Apple's `verifyReceipt` answer, read tolerantly.
///
/// Apple mixes shapes: iOS 7 receipts carry arrays (`in_app`, `latest_receipt_info`), iOS 6 ones a
/// single object for `latest_receipt_info`; numbers arrive as strings; `is_retryable` is spelled two
/// ways. This keeps the raw JSON and offers typed accessors over it.
public struct VerifyReceiptResponse: Sendable, Equatable {
    /// The whole answer as received.
    public var json: JSONValue

    /// Parses a response body.
    /// - Parameter body: the HTTP body.
    /// - Returns: nil when the body is not a JSON object with a numeric `status` (an outage page).
    public init?(body: [UInt8]) {
        guard let json = JSONValue.parseAnswer(body),
            json.objectValue != nil, json["status"]?.intValue != nil
        else { return nil }
        self.json = json
    }

    /// Wraps an already parsed answer.
    public init(json: JSONValue) { self.json = json }

    /// The JSON `status`.
    public var status: Int { json["status"]?.intValue ?? -1 }

    /// `"Production"` / `"Sandbox"` as Apple spells it, when present.
    public var environment: String? { json["environment"]?.stringValue }

    /// Apple's retry hint, from `is_retryable` or `is-retryable`, as bool or "0"/"1".
    public var isRetryable: Bool? { (json["is_retryable"] ?? json["is-retryable"])?.boolValue }

    /// The decoded receipt object.
    public var receipt: JSONValue? { json["receipt"] }

    /// `latest_receipt` (base64), present for receipts with auto-renewables.
    public var latestReceipt: String? { json["latest_receipt"]?.stringValue }

    /// Every transaction Apple listed: `receipt.in_app`, `latest_receipt_info` (array or iOS 6
    /// object) and `latest_expired_receipt_info`, de-duplicated by transaction id. Apple's order is
    /// not meaningful, so none is promised.
    public var transactions: [JSONValue] {
        var seen = Set<String>()
        var result: [JSONValue] = []
        func add(_ value: JSONValue?) {
            guard let value else { return }
            let items = value.arrayValue ?? (value.objectValue != nil ? [value] : [])
            for item in items {
                let id = item["transaction_id"]?.stringValue ?? UUID().uuidString
                if seen.insert(id).inserted { result.append(item) }
            }
        }
        add(json["latest_receipt_info"])
        add(json["latest_expired_receipt_info"])
        add(receipt?["in_app"])
        if receipt?["in_app"] == nil, let receipt, receipt["transaction_id"] != nil {
            add(receipt)  // iOS 6: the receipt object is itself the transaction
        }
        return result
    }

    /// ``transactions`` read as purchases, each with its JSON; a transaction that is not a
    /// purchase (no transaction or product id) is left out. What ``SubscriptionState/states(from:purchases:at:)``
    /// takes, so that a caller who also stores the purchases reads each one once.
    public var purchases: [(purchase: InAppPurchase, json: JSONValue)] {
        transactions.compactMap { json in InAppPurchase(appleJSON: json).map { ($0, json) } }
    }
}
