/// Why a receipt could not be decoded.
///
/// Equality is on the code only. The description is the bounded code plus a fixed text: it never
/// contains receipt bytes, so it is safe to log and to store in job envelopes.
public struct ReceiptDecodingError: Error, Sendable, Equatable, Hashable, CustomStringConvertible {
    private enum Code: String, Sendable {
        case invalidBase64 = "invalid_base64"
        case empty = "empty"
        case unknownFormat = "unknown_format"
        case notPKCS7 = "not_pkcs7"
        case notSignedData = "not_signed_data"
        case noContent = "no_content"
        case malformedPayload = "malformed_payload"
        case malformedTransactionReceipt = "malformed_transaction_receipt"
        case tooLarge = "too_large"
    }

    private let code: Code

    private init(_ code: Code) { self.code = code }

    /// The text is not valid base64, even after undoing the usual mangling.
    public static let invalidBase64 = ReceiptDecodingError(.invalidBase64)
    /// Nothing to decode.
    public static let empty = ReceiptDecodingError(.empty)
    /// Neither a DER/BER SEQUENCE (unified) nor a `{` plist (transaction).
    public static let unknownFormat = ReceiptDecodingError(.unknownFormat)
    /// Not a well-formed PKCS#7 ContentInfo.
    public static let notPKCS7 = ReceiptDecodingError(.notPKCS7)
    /// A ContentInfo, but not SignedData.
    public static let notSignedData = ReceiptDecodingError(.notSignedData)
    /// SignedData without encapsulated content (a detached signature).
    public static let noContent = ReceiptDecodingError(.noContent)
    /// The signed content is not a well-formed SET of receipt attributes.
    public static let malformedPayload = ReceiptDecodingError(.malformedPayload)
    /// An iOS 6 transaction receipt whose plist or base64 fields are broken.
    public static let malformedTransactionReceipt = ReceiptDecodingError(.malformedTransactionReceipt)
    /// Larger than ``ReceiptDecoder/maximumSize``.
    public static let tooLarge = ReceiptDecodingError(.tooLarge)

    /// Bounded machine-readable code, e.g. `invalid_base64`.
    public var reason: String { code.rawValue }

    public var description: String { "ReceiptDecodingError(\(code.rawValue))" }
}
