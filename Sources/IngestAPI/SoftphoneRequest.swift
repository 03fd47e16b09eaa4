import Foundation
import ReceiptCore

/// One name/value pair as it arrived in a query string, a form body or a JSON body.
public struct SoftphoneParameter: Sendable, Equatable {
    /// The name, decoded, as sent.
    public var name: String
    /// The value, decoded (`+` and `%XX` already turned into what they stand for).
    public var value: String

    /// Creates a parameter.
    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// Why a Cloud Softphone request was refused before any receipt was queued: a bounded code for
/// logs and metrics, and a sentence the softphone shows to its user (never a secret or a receipt).
public struct SoftphoneRequestError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Code: String, Sendable {
        case malformedBody = "malformed_body"
        case invalidEncoding = "invalid_encoding"
        case tooManyParameters = "too_many_parameters"
        case invalidName = "invalid_name"
        case parameterTooLong = "parameter_too_long"
        case duplicateParameter = "duplicate_parameter"
        case missingParameter = "missing_parameter"
        case invalidValue = "invalid_value"
        case metadataTooLarge = "metadata_too_large"
        case invalidReceipt = "invalid_receipt"
    }

    private let code: Code
    /// The sentence shown to the user (the 422 body's `message`).
    public let message: String

    private init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// A bounded snake_case code, e.g. `missing_parameter`.
    public var codeName: String { code.rawValue }
    public var description: String { "SoftphoneRequestError.\(code.rawValue)" }

    static func malformedBody(_ what: String) -> Self { Self(.malformedBody, "The request body is not valid \(what).") }
    static let invalidEncoding = Self(.invalidEncoding, "The request parameters must be UTF-8 text.")
    static let tooManyParameters = Self(
        .tooManyParameters, "The request has more than \(SoftphoneRequest.maxParameters) parameters.")
    static let invalidName = Self(
        .invalidName,
        "Parameter names must be 1 to \(SoftphoneRequest.maxNameLength) characters without control characters.")
    static func parameterTooLong(_ name: String, limit: Int) -> Self {
        Self(.parameterTooLong, "The \(name) parameter must be at most \(limit) characters.")
    }
    static func duplicateParameter(_ name: String) -> Self {
        Self(.duplicateParameter, "The \(name) parameter is given more than once with different values.")
    }
    static func missingParameter(_ name: String) -> Self { Self(.missingParameter, "The \(name) parameter is required.") }
    static func invalidValue(_ name: String, _ reason: String) -> Self { Self(.invalidValue, "The \(name) parameter \(reason).") }
    static let metadataTooLarge = Self(
        .metadataTooLarge, "The account parameters must be at most \(SubmitReceiptRequest.maxMetadataBytes) bytes in all.")
    static let invalidReceipt = Self(.invalidReceipt, "The receipt parameter is not an App Store receipt.")
}

/// `application/x-www-form-urlencoded` text: the GET query string and the default POST body.
public enum SoftphoneForm {
    /// Splits `a=1&b=2` into parameters: `&` separates pairs, the first `=` splits a pair, `+` is a
    /// space and `%XX` a byte. Empty pairs (`a=1&&b=2`, a trailing `&`) are skipped. A `%` not
    /// followed by two hex digits stays a `%`: the softphone substitutes values into its URL
    /// template without always encoding them, and refusing would only hide the real problem.
    ///
    /// A receipt's `+` therefore arrives as a space, which ``DecodedReceipt/decode(_:)`` restores.
    /// - Returns: the parameters in order, or an error when there are more than
    ///   ``SoftphoneRequest/maxParameters`` or a name or value is not UTF-8.
    public static func parse(_ text: some Collection<UInt8>) -> Result<[SoftphoneParameter], SoftphoneRequestError> {
        var parameters: [SoftphoneParameter] = []
        for pair in Array(text).split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            guard parameters.count < SoftphoneRequest.maxParameters else { return .failure(.tooManyParameters) }
            let separator = pair.firstIndex(of: UInt8(ascii: "="))
            let name = decode(pair[pair.startIndex..<(separator ?? pair.endIndex)])
            let value = separator.map { decode(pair[pair.index(after: $0)...]) } ?? ""
            guard let name, let value else { return .failure(.invalidEncoding) }
            parameters.append(SoftphoneParameter(name, value))
        }
        return .success(parameters)
    }

    /// Encodes pairs as form text; everything but unreserved characters is percent-encoded (a space
    /// as `%20`, which decoders read the same whether or not they take `+` for a space).
    public static func encode(_ pairs: [(String, String)]) -> String {
        pairs.map { "\(percentEncode($0.0))=\(percentEncode($0.1))" }.joined(separator: "&")
    }

    static func percentEncode(_ text: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(byte)
            default:
                out += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func decode(_ bytes: ArraySlice<UInt8>) -> String? {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "+") {
                out.append(UInt8(ascii: " "))
            } else if byte == UInt8(ascii: "%"), bytes.distance(from: index, to: bytes.endIndex) >= 3,
                let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
            {
                out.append(high << 4 | low)
                index += 3
                continue
            } else {
                out.append(byte)
            }
            index += 1
        }
        return String(validating: out, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// A JSON body (`iapWsContentType: application/json`): one object whose values are strings, or
/// numbers and booleans (a template may leave `%price%` unquoted), taken as their text.
public enum SoftphoneJSON {
    /// The object's members as parameters; `null` members are skipped.
    public static func parse(_ bytes: [UInt8]) -> Result<[SoftphoneParameter], SoftphoneRequestError> {
        guard let value = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)), case .object(let object) = value else {
            return .failure(.malformedBody("JSON: send one object of parameters"))
        }
        guard object.count <= SoftphoneRequest.maxParameters else { return .failure(.tooManyParameters) }
        var parameters: [SoftphoneParameter] = []
        // Sorted, so the same body always yields the same parameters (and the same first error).
        for name in object.keys.sorted() {
            switch object[name] {
            case .null?, nil: continue
            case .string(let text)?: parameters.append(SoftphoneParameter(name, text))
            case .number?, .bool?: parameters.append(SoftphoneParameter(name, object[name]?.stringValue ?? ""))
            case .array?, .object?:
                let shown = SoftphoneRequest.isAcceptableName(name) ? name : "each"
                return .failure(.invalidValue(shown, "must be a string or a number"))
            }
        }
        return .success(parameters)
    }
}

/// A validated Cloud Softphone purchase: the receipt, the product the softphone says was bought,
/// and what the receipt is stored with.
///
/// Parameters, by name (case-insensitive):
/// - `receipt` (required): base64, with `+` possibly turned into spaces by form decoding;
/// - `productCode`, or its alias `product` (required): must be among the receipt's purchases;
/// - `price`, `currency`: untrusted (the softphone reports them), stored as metadata;
/// - `username`: stored as the receipt's `user_identifier` (and not repeated in the metadata);
/// - credentials (``credentialNames``, e.g. `token`): used to authenticate, never stored;
/// - anything else (account variables): stored as metadata, as strings.
public struct SoftphoneRequest: Sendable, Equatable {
    /// The most parameters a request may carry (query string and body together).
    public static let maxParameters = 64
    /// The longest parameter name.
    public static let maxNameLength = 64
    /// The longest value of any parameter but `receipt` (bounded by the body size instead).
    public static let maxValueLength = 1024
    /// The longest `username`, as in the client API's `user_identifier`.
    public static let maxUsernameLength = 255
    /// Parameter names (lower case) that carry credentials: read for authentication, never stored.
    public static let credentialNames: Set<String> = [
        "token", "access_token", "api_token", "api_key", "apikey", "password", "passwd", "pass", "secret", "auth",
        "authorization",
    ]

    /// The receipt as decoded locally.
    public var receipt: DecodedReceipt
    /// The product the softphone says was bought.
    public var productCode: String
    /// The softphone's account `username`, if sent.
    public var username: String?
    /// Every stored parameter but `receipt` and `username`, including `productCode`, `price` and
    /// `currency`, as strings.
    public var metadata: [String: String]

    /// What the receipt is stored with (the client address is added by the service).
    public var submission: Submission {
        Submission(userIdentifier: username, metadata: .object(metadata.mapValues { .string($0) }))
    }

    /// The API token of the request (`token`), if any: one of the app's API tokens, the way to
    /// authenticate when the softphone cannot send HTTP credentials.
    public static func token(in parameters: [SoftphoneParameter]) -> String? {
        parameters.first { $0.name.lowercased() == "token" }?.value
    }

    /// Validates the parameters of one request (query string first, then body).
    public static func parse(_ parameters: [SoftphoneParameter]) -> Result<SoftphoneRequest, SoftphoneRequestError> {
        guard parameters.count <= maxParameters else { return .failure(.tooManyParameters) }
        // Known names match case-insensitively; account variables keep their spelling.
        var byKey: [String: SoftphoneParameter] = [:]
        var order: [String] = []
        for parameter in parameters {
            guard isAcceptableName(parameter.name) else { return .failure(.invalidName) }
            var key = parameter.name.lowercased()
            if key == "product" { key = "productcode" }
            if key != "receipt", parameter.value.unicodeScalars.count > maxValueLength {
                return .failure(.parameterTooLong(parameter.name, limit: maxValueLength))
            }
            if let earlier = byKey[key] {
                // The same value twice (say, in the URL template and the body) is harmless; two
                // different ones are ambiguous, and guessing could credit the wrong product.
                guard earlier.value == parameter.value else { return .failure(.duplicateParameter(parameter.name)) }
                continue
            }
            byKey[key] = parameter
            order.append(key)
        }

        guard let receiptText = byKey["receipt"]?.value, !receiptText.isEmpty else {
            return .failure(.missingParameter("receipt"))
        }
        guard let product = byKey["productcode"]?.value, !product.isEmpty else {
            return .failure(.missingParameter("productCode"))
        }
        guard product.unicodeScalars.allSatisfy({ $0.properties.generalCategory != .control }) else {
            return .failure(.invalidValue("productCode", "must not contain control characters"))
        }
        var username: String?
        if let value = byKey["username"]?.value, !value.isEmpty {
            guard value.unicodeScalars.count <= maxUsernameLength else { return .failure(.parameterTooLong("username", limit: maxUsernameLength)) }
            username = value
        }

        var metadata: [String: String] = [:]
        for key in order where key != "receipt" && key != "username" && !credentialNames.contains(key) {
            guard let parameter = byKey[key] else { continue }
            switch key {
            case "productcode": metadata["productCode"] = parameter.value
            case "price": metadata["price"] = parameter.value
            case "currency": metadata["currency"] = parameter.value
            default: metadata[parameter.name] = parameter.value
            }
        }
        guard JSONValue.object(metadata.mapValues { .string($0) }).encodedSize <= SubmitReceiptRequest.maxMetadataBytes else {
            return .failure(.metadataTooLarge)
        }

        // The receipt is decoded last: it is the costly part, and the cheaper errors are clearer.
        let decoded: DecodedReceipt
        switch DecodedReceipt.decode(receiptText) {
        case .success(let value): decoded = value
        case .failure: return .failure(.invalidReceipt)
        }
        return .success(SoftphoneRequest(receipt: decoded, productCode: product, username: username, metadata: metadata))
    }

    /// Whether `name` may be a parameter name: 1 to ``maxNameLength`` characters, no control characters.
    static func isAcceptableName(_ name: String) -> Bool {
        !name.isEmpty && name.unicodeScalars.count <= maxNameLength
            && name.unicodeScalars.allSatisfy { $0.properties.generalCategory != .control }
    }
}
