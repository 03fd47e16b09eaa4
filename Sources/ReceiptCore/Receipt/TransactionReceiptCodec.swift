import Foundation

/// iOS 6 "transaction receipts" (`SKPaymentTransaction.transactionReceipt`).
///
/// The receipt is (base64 of) an old-style plist:
/// `{ "signature" = "<b64>"; "purchase-info" = "<b64>"; "environment" = "Sandbox"; "pod" = "100"; "signing-status" = "0"; }`
/// and `purchase-info` is itself base64 of an old-style plist with hyphenated keys. The signature blob is
/// version byte ‖ RSA signature (128 bytes for version 2, 256 for version 3) ‖ 4-byte big-endian
/// certificate length ‖ DER certificate; the signature is RSA-SHA1 over ``signedBytes(version:purchaseInfo:)``.
public enum TransactionReceiptCodec {
    /// Decodes the plist bytes (already base64-decoded once) of a transaction receipt.
    public static func decode(_ bytes: [UInt8]) throws(ReceiptDecodingError) -> AppReceipt {
        guard bytes.count <= ReceiptDecoder.maximumSize else { throw .tooLarge }
        let outer: [String: String]
        do {
            outer = try OldStylePlist.parseStringDictionary(bytes)
        } catch {
            throw .malformedTransactionReceipt
        }
        guard let purchaseInfoText = outer["purchase-info"], let purchaseInfo = ReceiptBase64.decode(purchaseInfoText),
            !purchaseInfo.isEmpty
        else { throw .malformedTransactionReceipt }
        var signature: [UInt8]?
        if let signatureText = outer["signature"] {
            // Present but broken is malformed; absent is left to the signature check to reject.
            guard let blob = ReceiptBase64.decode(signatureText) else { throw .malformedTransactionReceipt }
            signature = blob
        }
        let info: [String: String]
        do {
            info = try OldStylePlist.parseStringDictionary(purchaseInfo)
        } catch {
            throw .malformedTransactionReceipt
        }

        var purchase = InAppPurchase(
            productID: info["product-id"] ?? "",
            transactionID: info["transaction-id"] ?? "",
            originalTransactionID: info["original-transaction-id"] ?? ""
        )
        if let quantityText = info["quantity"] {
            guard let quantity = Int(quantityText) else { throw .malformedTransactionReceipt }
            purchase.quantity = quantity
        }
        purchase.purchaseDate = date(info, milliseconds: "purchase-date-ms", formatted: "purchase-date")
        purchase.originalPurchaseDate = date(
            info, milliseconds: "original-purchase-date-ms", formatted: "original-purchase-date")
        // `expires-date` is milliseconds in these receipts (unlike iOS 7); `-formatted` is the readable twin.
        purchase.expiresDate = date(info, milliseconds: "expires-date", formatted: "expires-date-formatted")
        purchase.cancellationDate = date(info, milliseconds: "cancellation-date-ms", formatted: "cancellation-date")
        purchase.webOrderLineItemID = info["web-order-line-item-id"]
        purchase.isTrialPeriod = flag(info["is-trial-period"])
        purchase.isInIntroOfferPeriod = flag(info["is-in-intro-offer-period"])
        purchase.promotionalOfferID = info["promotional-offer-id"]
        purchase.subscriptionGroupIdentifier = info["subscription-group-identifier"]

        return AppReceipt(
            style: .transaction,
            bundleID: info["bid"] ?? "",
            // Production transaction receipts carry no `environment` key.
            environment: outer["environment"].map(ReceiptEnvironment.init(rawValue:)) ?? .production,
            applicationVersion: info["bvrs"],
            inApp: [purchase],
            transactionInfo: info,
            transactionSignature: signature,
            transactionPurchaseInfo: purchaseInfo
        )
    }

    /// The bytes the RSA-SHA1 signature covers: version byte ‖ decoded purchase-info.
    public static func signedBytes(version: UInt8, purchaseInfo: [UInt8]) -> [UInt8] {
        [version] + purchaseInfo
    }

    /// Splits a signature blob into version, RSA signature and DER certificate; nil when the layout
    /// does not add up.
    public static func parseSignatureBlob(_ blob: [UInt8]) -> (version: UInt8, signature: [UInt8], certificate: [UInt8])? {
        guard let version = blob.first else { return nil }
        // Version 2 used 1024-bit keys, version 3 2048-bit; an unknown version is accepted only if
        // exactly one signature size makes the certificate length add up.
        let candidates: [Int]
        switch version {
        case 2: candidates = [128]
        case 3: candidates = [256]
        default: candidates = [128, 256]
        }
        let fits = candidates.filter { size in
            guard blob.count >= 1 + size + 4 else { return false }
            let length = blob[(1 + size)..<(1 + size + 4)].reduce(0) { $0 << 8 | Int($1) }
            return length > 0 && length == blob.count - (1 + size + 4)
        }
        guard fits.count == 1, let size = fits.first else { return nil }
        return (version, Array(blob[1..<(1 + size)]), Array(blob[(1 + size + 4)...]))
    }

    /// Builds a signature blob: version ‖ signature ‖ 4-byte big-endian certificate length ‖ certificate.
    public static func signatureBlob(version: UInt8, signature: [UInt8], certificate: [UInt8]) -> [UInt8] {
        let length = UInt32(truncatingIfNeeded: certificate.count)
        return [version] + signature + withUnsafeBytes(of: length.bigEndian, Array.init) + certificate
    }

    /// The purchase-info plist bytes for `fields` (keys sorted, so the bytes are reproducible): sign
    /// ``signedBytes(version:purchaseInfo:)`` of these, then pass the same fields to ``encode(environment:purchaseInfo:signatureBlob:)``.
    public static func encodePurchaseInfo(_ fields: [String: String]) -> [UInt8] {
        OldStylePlist.write(fields.sorted { $0.key < $1.key }.map { (key: $0.key, value: $0.value) })
    }

    /// The inverse of ``decode(_:)``, for forging test receipts: the outer plist bytes (base64 them
    /// for transport). `environment` "Production" is written as no `environment` key, as Apple does.
    public static func encode(environment: String, purchaseInfo: [String: String], signatureBlob: [UInt8]) -> [UInt8] {
        encode(environment: environment, purchaseInfoBytes: encodePurchaseInfo(purchaseInfo), signatureBlob: signatureBlob)
    }

    /// As ``encode(environment:purchaseInfo:signatureBlob:)``, with purchase-info bytes made elsewhere.
    public static func encode(environment: String, purchaseInfoBytes: [UInt8], signatureBlob: [UInt8]) -> [UInt8] {
        var entries: [(key: String, value: String)] = [
            ("signature", Data(signatureBlob).base64EncodedString()),
            ("purchase-info", Data(purchaseInfoBytes).base64EncodedString()),
        ]
        if environment != ReceiptEnvironment.production.rawValue { entries.append(("environment", environment)) }
        entries.append(("pod", "100"))
        entries.append(("signing-status", "0"))
        return OldStylePlist.write(entries)
    }

    // MARK: - Internals

    private static func date(_ info: [String: String], milliseconds: String, formatted: String) -> Date? {
        if let text = info[milliseconds], let millis = Int64(text) {
            return Date(timeIntervalSince1970: Double(millis) / 1000)
        }
        guard let text = info[formatted] else { return nil }
        return formattedDate(text)
    }

    /// `2012-12-02 07:15:54 Etc/GMT`; other zones are not guessed at.
    private static func formattedDate(_ text: String) -> Date? {
        for suffix in [" Etc/GMT", " GMT", " UTC"] where text.hasSuffix(suffix) {
            let stamp = text.dropLast(suffix.count)
            return ReceiptDate.parse(stamp + "Z")
        }
        return nil
    }

    private static func flag(_ text: String?) -> Bool {
        guard let text else { return false }
        return text == "1" || text.lowercased() == "true"
    }
}
