import Foundation

extension InAppPurchase {
    /// Reads one transaction of a `verifyReceipt` answer (`in_app`, `latest_receipt_info`, or an
    /// iOS 6 receipt object). Every value may be a string; dates come as `*_ms`, as a millisecond
    /// string (iOS 6 `expires_date`), or as `"2013-08-01 07:00:00 Etc/GMT"`.
    /// - Returns: nil when the transaction has no `transaction_id` or `product_id`.
    public init?(appleJSON json: JSONValue) {
        guard let transactionID = json["transaction_id"]?.stringValue,
            let productID = json["product_id"]?.stringValue
        else { return nil }
        func date(_ key: String) -> Date? { AppleDateFormat.date(json, key) }
        self.init(
            quantity: json["quantity"]?.intValue ?? 1,
            productID: productID,
            transactionID: transactionID,
            originalTransactionID: json["original_transaction_id"]?.stringValue ?? transactionID,
            purchaseDate: date("purchase_date"),
            originalPurchaseDate: date("original_purchase_date"),
            expiresDate: date("expires_date"),
            cancellationDate: date("cancellation_date"),
            webOrderLineItemID: json["web_order_line_item_id"]?.stringValue,
            isTrialPeriod: json["is_trial_period"]?.boolValue ?? false,
            isInIntroOfferPeriod: json["is_in_intro_offer_period"]?.boolValue ?? false
        )
        cancellationReason = cancellationDate == nil ? nil : json["cancellation_reason"]?.intValue
        appAccountToken = json["app_account_token"]?.stringValue.flatMap(UUID.init(uuidString:))
        promotionalOfferID = json["promotional_offer_id"]?.stringValue
        ownershipType = json["in_app_ownership_type"]?.stringValue
        // An offer code has no other home; the other offers are in the flags and the promotional id
        // (``statedOffer`` reads them).
        offer = json["offer_code_ref_name"]?.stringValue.map { PurchaseOffer(type: .offerCode, identifier: $0) }
        // verifyReceipt says nothing of the kind or share of a refund: its cancellation is whole,
        // and no revocation is stated (the ledger keeps a signed transaction's).
    }

    /// This purchase in Apple's `verifyReceipt` JSON shape (iOS 7 style), as the mock App Store answers.
    public var appleJSON: JSONValue {
        var object: [String: JSONValue] = [
            "quantity": .string(String(quantity)),
            "product_id": .string(productID),
            "transaction_id": .string(transactionID),
            "original_transaction_id": .string(originalTransactionID),
            "is_trial_period": .string(isTrialPeriod ? "true" : "false"),
            "is_in_intro_offer_period": .string(isInIntroOfferPeriod ? "true" : "false"),
        ]
        func put(_ key: String, _ date: Date?) {
            guard let date else { return }
            object[key] = .string(AppleDateFormat.format(date))
            object["\(key)_ms"] = .string(String(Int64((date.timeIntervalSince1970 * 1000).rounded())))
        }
        put("purchase_date", purchaseDate)
        put("original_purchase_date", originalPurchaseDate)
        put("expires_date", expiresDate)
        put("cancellation_date", cancellationDate)
        if let webOrderLineItemID { object["web_order_line_item_id"] = .string(webOrderLineItemID) }
        if let ownershipType { object["in_app_ownership_type"] = .string(ownershipType) }
        if offer?.type == .offerCode { object["offer_code_ref_name"] = offer?.identifier.map(JSONValue.string) }
        if let promotionalOfferID { object["promotional_offer_id"] = .string(promotionalOfferID) }
        return .object(object)
    }
}

/// Apple's `verifyReceipt` date text: `"2013-08-01 07:00:00 Etc/GMT"`.
public enum AppleDateFormat {
    /// Formats a date as Apple does (UTC, `Etc/GMT`).
    public static func format(_ date: Date) -> String {
        // Day arithmetic, not a Calendar per call: the mock App Store writes three or four per
        // purchase in every answer, and formatting through a Calendar was 6 % of its CPU.
        let c = ReceiptDate.utcFields(Int(ReceiptDate.clampedInterval(date).rounded(.down)))
        func pad(_ value: Int, _ width: Int = 2) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(c.year, 4))-\(pad(c.month))-\(pad(c.day)) \(pad(c.hour)):\(pad(c.minute)):\(pad(c.second)) Etc/GMT"
    }

    /// The date `key` names in a `verifyReceipt` object: `<key>_ms`, else `<key>` as milliseconds or
    /// as Apple's date text. A number that is not finite (`"nan"`, `"inf"`: `Double` reads both) is
    /// no date, as unreadable text is none.
    public static func date(_ json: JSONValue, _ key: String) -> Date? {
        func milliseconds(_ text: String?) -> Date? {
            guard let ms = text.flatMap(Double.init), ms.isFinite else { return nil }
            return Date(timeIntervalSince1970: ms / 1000)
        }
        if let date = milliseconds(json["\(key)_ms"]?.stringValue) { return date }
        guard let text = json[key]?.stringValue, !text.isEmpty else { return nil }
        return milliseconds(text) ?? parse(text)
    }

    /// Parses `"yyyy-MM-dd HH:mm:ss Etc/GMT"` (the zone is always GMT for these fields).
    public static func parse(_ text: String) -> Date? {
        let parts = text.split(separator: " ")
        guard parts.count >= 2 else { return nil }
        let day = parts[0].split(separator: "-").compactMap { Int($0) }
        let time = parts[1].split(separator: ":").compactMap { Int($0) }
        guard day.count == 3, time.count == 3 else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar.date(
            from: DateComponents(year: day[0], month: day[1], day: day[2], hour: time[0], minute: time[1], second: time[2]))
    }
}
