import Foundation

/// Checks locally that Apple signed a receipt: the ingestion API's 402 (possible fraud).
public protocol ReceiptAuthenticity: Sendable {
    /// Nil when Apple (or a certificate the operator trusts) signed exactly these bytes; otherwise
    /// a bounded reason such as `signature_mismatch` or `untrusted_chain`.
    func fraudReason(bytes: [UInt8], receipt: AppReceipt) -> String?
}
