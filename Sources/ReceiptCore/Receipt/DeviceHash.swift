import Foundation

/// The input of a unified receipt's device hash (attribute 5), as Apple's receipt validation guide
/// defines it: the device's `identifierForVendor` as its 16 raw bytes, then the opaque value
/// (attribute 4), then the bundle id attribute's value as signed (its DER bytes, not the string).
/// SHA-1 of this is attribute 5 when the receipt was issued to that device; the hashing itself is
/// the caller's (OpenSSL), this module stays pure.
public enum DeviceHash {
    /// The bytes to hash for `identifierForVendor`, or nil when the receipt cannot say (a
    /// transaction receipt, or a unified one without an opaque value or a hash).
    public static func input(identifierForVendor: UUID, receipt: AppReceipt) -> [UInt8]? {
        guard receipt.style == .unified, let opaque = receipt.opaqueValue, receipt.sha1Hash != nil else { return nil }
        let uuid = identifierForVendor.uuid
        let vendor = withUnsafeBytes(of: uuid) { Array($0) }
        return vendor + opaque + (receipt.bundleIDValue ?? ReceiptDERWriter.element(tag: 0x0C, Array(receipt.bundleID.utf8)))
    }
}
