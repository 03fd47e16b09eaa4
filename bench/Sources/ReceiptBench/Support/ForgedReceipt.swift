import DevTools
import Foundation
import OpenSSL
import ReceiptCore
import ReceiptSignature

/// The bench's typical receipt: a unified receipt of about 4 KB of DER (payload + the signer's
/// chain), like a real one, signed SHA-256 by a test CA. The `receipt` row times its decoding and
/// verification, the `ingest` row POSTs it to the API.
enum ForgedReceipt {
    /// ``ReceiptForger/demoReceipt(bundleID:now:)`` grown purchase by purchase (2…10) until its
    /// DER is at least 4,000 bytes, signed by `authority`.
    /// - Returns: the decoded receipt as forged, and its DER.
    static func fourKilobytes(
        bundleID: String, authority: TestCertificateAuthority, now: Date = Date()
    ) throws -> (receipt: AppReceipt, der: [UInt8]) {
        var receipt = ReceiptForger.demoReceipt(bundleID: bundleID, now: now)
        var bytes = try ReceiptForger.unified(receipt, authority: authority, digest: .sha256)
        var serial = 3
        while bytes.count < 4_000, receipt.inApp.count < 10 {
            let purchased = now.addingTimeInterval(-Double(serial) * 86_400)
            receipt.inApp.append(
                InAppPurchase(
                    productID: "\(bundleID).pro.monthly", transactionID: "10000012345678\(serial)",
                    originalTransactionID: "100000123456780", purchaseDate: purchased, originalPurchaseDate: purchased,
                    expiresDate: purchased.addingTimeInterval(30 * 86_400), webOrderLineItemID: "2000000012345\(serial)"))
            bytes = try ReceiptForger.unified(receipt, authority: authority, digest: .sha256)
            serial += 1
        }
        return (receipt, bytes)
    }
}
