import Foundation
import ReceiptCore

/// What `receiptq receipt inspect` prints: the decoded receipt with Apple's field names, and the
/// signature check.
public enum ReceiptInspector {
    /// Decodes and verifies `bytes`.
    /// - Parameters:
    ///   - bytes: the receipt (after base64).
    ///   - verifier: the signature verifier; nil reports `no_trust_roots`.
    ///   - time: when certificates are judged.
    /// - Returns: one JSON object: `style`, `bundle_id`, `environment`, `application_version`,
    ///   `original_application_version`, `creation_date`, `in_app`, `signature`.
    /// - Throws: `ReceiptDecodingError` when the bytes are not a receipt.
    public static func inspect(
        bytes: [UInt8], verifier: ReceiptSignatureVerifier?, time: VerificationTime = .receiptDate
    ) throws(ReceiptDecodingError) -> JSONValue {
        let receipt = try ReceiptDecoder.decode(bytes: bytes)
        let signature =
            verifier?.verify(bytes: bytes, receipt: receipt, time: time)
            ?? SignatureResult(valid: false, reason: "no_trust_roots", signer: nil, digest: nil)
        return .object([
            "style": .string(receipt.style.rawValue),
            "bundle_id": .string(receipt.bundleID),
            "environment": .string(receipt.environment.rawValue),
            "application_version": string(receipt.applicationVersion),
            "original_application_version": string(receipt.originalApplicationVersion),
            "creation_date": date(receipt.creationDate),
            "in_app": .array(receipt.inApp.map(purchase)),
            "signature": .object([
                "valid": .bool(signature.valid),
                "reason": string(signature.reason),
                "signer": string(signature.signer),
                "digest": string(signature.digest),
            ]),
        ])
    }

    static func purchase(_ purchase: InAppPurchase) -> JSONValue {
        .object([
            "product_id": .string(purchase.productID),
            "transaction_id": .string(purchase.transactionID),
            "original_transaction_id": .string(purchase.originalTransactionID),
            "purchase_date": date(purchase.purchaseDate),
            "original_purchase_date": date(purchase.originalPurchaseDate),
            "expires_date": date(purchase.expiresDate),
            "cancellation_date": date(purchase.cancellationDate),
            "quantity": .number(Double(purchase.quantity)),
            "web_order_line_item_id": string(purchase.webOrderLineItemID),
            "is_trial_period": .bool(purchase.isTrialPeriod),
            "is_in_intro_offer_period": .bool(purchase.isInIntroOfferPeriod),
        ])
    }

    static func string(_ value: String?) -> JSONValue { value.map(JSONValue.string) ?? .null }

    /// ISO 8601 in UTC, with milliseconds only when the date has them.
    static func date(_ value: Date?) -> JSONValue {
        guard let value else { return .null }
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        if value.timeIntervalSince1970.truncatingRemainder(dividingBy: 1) != 0 {
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        }
        return .string(formatter.string(from: value))
    }
}
