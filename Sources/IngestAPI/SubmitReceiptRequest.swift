import Foundation
import ReceiptCore

/// The body of `POST /client/itunes_connect/receipts`, validated field by field.
///
/// Unknown fields are ignored, as in the client API this endpoint is compatible with.
public struct SubmitReceiptRequest: Sendable, Equatable {
    /// The receipt as decoded locally.
    public var receipt: DecodedReceipt
    public var submission: Submission
    /// True when `ip_address` was absent (so the peer address applies), false when given or `null`.
    public var ipAddressOmitted: Bool

    /// The largest `metadata` object accepted, as encoded JSON.
    public static let maxMetadataBytes = 16 * 1024

    /// Validates a parsed JSON body.
    /// - Returns: the request, or every field error found.
    public static func parse(_ body: JSONValue) -> Result<SubmitReceiptRequest, FieldErrors> {
        guard let object = body.objectValue else {
            return .failure(FieldErrors([FieldError(field: "body", reason: "must be a JSON object")]))
        }
        var errors: [FieldError] = []
        var receipt: DecodedReceipt?
        switch object["receipt"] {
        case .string(let text)?:
            switch DecodedReceipt.decode(text) {
            case .success(let decoded): receipt = decoded
            case .failure(let error): errors.append(error)
            }
        case nil, .null?:
            errors.append(FieldError(field: "receipt", reason: "is required"))
        default:
            errors.append(FieldError(field: "receipt", reason: "must be a base64 string"))
        }

        let (submission, ipOmitted) = parseSubmission(object, &errors)
        guard errors.isEmpty, let receipt else { return .failure(FieldErrors(errors)) }
        return .success(
            SubmitReceiptRequest(receipt: receipt, submission: submission, ipAddressOmitted: ipOmitted))
    }

    /// The fields every submission carries (`user_identifier`, `country_code`,
    /// `identifier_for_vendor`, `ip_address`, `metadata`, `app_account_token`), validated; errors
    /// are appended.
    /// - Returns: the submission, and whether `ip_address` was absent (the peer's address applies).
    static func parseSubmission(_ object: [String: JSONValue], _ errors: inout [FieldError]) -> (Submission, ipAddressOmitted: Bool) {
        var submission = Submission()
        submission.userIdentifier = optionalString(object, "user_identifier", maxLength: 255, &errors)
        if let country = optionalString(object, "country_code", maxLength: 2, &errors) {
            if country.count == 2, country.allSatisfy({ $0.isASCII && $0.isLetter }) {
                submission.countryCode = country.uppercased()
            } else {
                errors.append(FieldError(field: "country_code", reason: "must be an ISO 3166-1 alpha-2 code"))
            }
        }
        if let idfv = optionalString(object, "identifier_for_vendor", maxLength: 36, &errors) {
            if let uuid = UUID(uuidString: idfv) {
                submission.identifierForVendor = uuid.canonical
            } else {
                errors.append(FieldError(field: "identifier_for_vendor", reason: "must be a UUID"))
            }
        }
        if let token = optionalString(object, "app_account_token", maxLength: 36, &errors) {
            if let uuid = UUID(uuidString: token) {
                submission.appAccountToken = uuid
            } else {
                errors.append(FieldError(field: "app_account_token", reason: "must be a UUID"))
            }
        }
        let ipOmitted = object["ip_address"] == nil
        if let ip = optionalString(object, "ip_address", maxLength: 45, &errors) {
            if IPAddressText.isValid(ip) {
                submission.ipAddress = ip
            } else {
                errors.append(FieldError(field: "ip_address", reason: "must be an IPv4 or IPv6 address"))
            }
        }
        switch object["metadata"] {
        case nil, .null?: break
        case .object(let metadata)?:
            if JSONValue.object(metadata).encodedSize > maxMetadataBytes {
                errors.append(FieldError(field: "metadata", reason: "must be at most \(maxMetadataBytes) bytes of JSON"))
            } else {
                submission.metadata = .object(metadata)
            }
        default:
            errors.append(FieldError(field: "metadata", reason: "must be a JSON object"))
        }
        return (submission, ipOmitted)
    }

    static func optionalString(
        _ object: [String: JSONValue], _ field: String, maxLength: Int, _ errors: inout [FieldError]
    ) -> String? {
        switch object[field] {
        case nil, .null?: return nil
        case .string(let value)?:
            // Code points, as JSON Schema's maxLength counts them (a grapheme may hold many).
            guard value.unicodeScalars.count <= maxLength else {
                errors.append(FieldError(field: field, reason: "must be at most \(maxLength) characters"))
                return nil
            }
            return value
        default:
            errors.append(FieldError(field: field, reason: "must be a string"))
            return nil
        }
    }
}

/// Textual IP address checks, without a resolver.
enum IPAddressText {
    static func isValid(_ text: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, text, &v4) == 1 || inet_pton(AF_INET6, text, &v6) == 1
    }
}
