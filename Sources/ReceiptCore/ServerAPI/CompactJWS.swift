import Foundation
import Synchronization

/// Why a JWS was not accepted: a closed set of cases, each with its stable string (``reason``),
/// which exists only at the edges (the API's 402 `fraud_reason`, a stored `response_…` failure
/// code, `receipt inspect`). It never carries payload data.
public enum JWSFailure: String, Error, Sendable, CaseIterable, CustomStringConvertible {
    /// Not three base64url segments with a JSON header, or too large.
    case malformedJWS = "malformed_jws"
    /// `alg` is not `ES256` (Apple signs with nothing else; `none` and HMAC are forgeries).
    case unsupportedAlgorithm = "unsupported_algorithm"
    /// No `x5c` chain in the header: absent, not an array, or empty.
    case missingCertificateChain = "missing_certificate_chain"
    /// An `x5c` entry is not a certificate: not a string, not base64, or not DER.
    case malformedCertificateChain = "malformed_certificate_chain"
    /// More `x5c` entries than any chain to Apple's root has (leaf, intermediate, root: 4 at most).
    case certificateChainTooLong = "certificate_chain_too_long"
    /// The chain does not lead to a trusted root at the signing date.
    case untrustedChain = "untrusted_chain"
    /// The chain lacks Apple's marker extensions on its leaf or intermediate.
    case missingAppleMarker = "missing_apple_marker"
    /// The signature does not verify with the leaf's key.
    case invalidSignature = "invalid_signature"
    /// The payload is not a JSON object, or a documented field has the wrong type.
    case malformedPayload = "malformed_payload"
    /// Signed by Apple, but for another app.
    case bundleIDMismatch = "bundle_id_mismatch"
    /// Signed by Apple, but for another app id.
    case appAppleIDMismatch = "app_apple_id_mismatch"
    /// Signed by Apple, but for the other environment than expected.
    case environmentMismatch = "environment_mismatch"
    /// Nothing to check the signature against (`receipt inspect` without trusted roots).
    case noTrustRoots = "no_trust_roots"
    /// Apple's OCSP responder says the signing certificate (or its intermediate) is revoked.
    case certificateRevoked = "certificate_revoked"
    /// The chain's revocation could not be learnt (responder unreachable, or no good answer) and
    /// the deployment hard-fails (`RECEIPTQ_OCSP=hard`).
    case revocationUnavailable = "revocation_unavailable"

    /// The stable string: the API's `fraud_reason`, the tail of a stored `response_…` code.
    public var reason: String { rawValue }

    public var description: String { "JWSFailure(\(reason))" }
}

/// A compact JWS (`header.payload.signature`) as Apple signs transactions, renewal infos and
/// notifications: parsed, not yet verified.
public struct CompactJWS: Sendable, Equatable {
    /// The largest JWS accepted: a notification with its two nested JWS is ~15 KB.
    public static let maxLength = 256 * 1024
    /// The most `x5c` entries accepted: Apple sends leaf, intermediate and root.
    public static let maxChainLength = 4

    public var header: JSONValue
    public var payload: [UInt8]
    public var signature: [UInt8]
    /// `header.payload` as sent: what the signature covers.
    public var signingInput: [UInt8]
    /// The header's `x5c` certificates (DER), leaf first.
    public var x5c: [[UInt8]]

    /// Parses `text`.
    /// - Throws: ``JWSFailure`` `malformed_jws`, `unsupported_algorithm`, `missing_certificate_chain`,
    ///   `certificate_chain_too_long` or `malformed_certificate_chain`.
    public init(_ text: some StringProtocol) throws(JWSFailure) {
        guard text.utf8.count <= Self.maxLength else { throw .malformedJWS }
        // The three segments from one contiguous copy of the text (a generic walk over another
        // module's UTF8View cost more than the ECDSA check).
        var string = String(text)
        let parts = string.withUTF8 { bytes -> (header: [UInt8], payload: [UInt8], signature: [UInt8], signingInput: [UInt8])? in
            guard let first = bytes.firstIndex(of: UInt8(ascii: ".")),
                let second = bytes[(first + 1)...].firstIndex(of: UInt8(ascii: ".")),
                bytes[(second + 1)...].firstIndex(of: UInt8(ascii: ".")) == nil, first > 0, second > first + 1,
                let payload = Base64URL.decode(bytes: UnsafeBufferPointer(rebasing: bytes[(first + 1)..<second])),
                let signature = Base64URL.decode(bytes: UnsafeBufferPointer(rebasing: bytes[(second + 1)...]))
            else { return nil }
            return (Array(bytes[0..<first]), payload, signature, Array(bytes[0..<second]))
        }
        guard let parts else { throw .malformedJWS }
        let header = try Self.header(segment: parts.header)
        self.header = header.json
        self.payload = parts.payload
        self.signature = parts.signature
        self.signingInput = parts.signingInput
        self.x5c = header.x5c
    }

    /// A header segment, decoded and checked; Apple signs with a handful of chains, so the headers
    /// of the last few (their text is identical from one JWS to the next) are kept decoded.
    private static func header(segment: [UInt8]) throws(JWSFailure) -> (json: JSONValue, x5c: [[UInt8]]) {
        let key = HeaderKey(bytes: segment)
        if let known = headers.withLock({ $0[key] }) { return known }
        guard let bytes = segment.withUnsafeBufferPointer({ Base64URL.decode(bytes: $0) }), let header = try? JSONValue.parse(bytes),
            header.objectValue != nil
        else { throw .malformedJWS }
        guard header["alg"]?.stringValue == "ES256", case .string = header["alg"] else { throw .unsupportedAlgorithm }
        guard let entries = header["x5c"]?.arrayValue, !entries.isEmpty else { throw .missingCertificateChain }
        guard entries.count <= Self.maxChainLength else { throw .certificateChainTooLong }
        var x5c: [[UInt8]] = []
        for entry in entries {
            // x5c is standard base64 (RFC 7515 §4.1.6), not base64url.
            guard case .string(let text) = entry, let der = Data(base64Encoded: text), !der.isEmpty else {
                throw .malformedCertificateChain
            }
            x5c.append(Array(der))
        }
        headers.withLock { known in
            // Bounded: a flood of distinct headers (forgeries) empties it rather than growing it.
            if known.count >= Self.headerCacheSize { known.removeAll(keepingCapacity: true) }
            known[key] = (header, x5c)
        }
        return (header, x5c)
    }

    private static let headerCacheSize = 64
    private static let headers = Mutex<[HeaderKey: (json: JSONValue, x5c: [[UInt8]])]>([:])

    /// A header segment as a key hashed in one pass (`[UInt8]` hashes byte by byte).
    private struct HeaderKey: Hashable {
        let bytes: [UInt8]

        func hash(into hasher: inout Hasher) {
            bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        }
    }

    /// Whether `text` looks like a compact JWS (three base64url segments), without decoding it.
    public static func looksLikeJWS(_ text: some StringProtocol) -> Bool {
        let segments = text.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        return segments.count == 3 && segments[0].first == UInt8(ascii: "e")
            && segments.allSatisfy { $0.allSatisfy { Base64URLAlphabet.contains($0) } }
    }
}

private enum Base64URLAlphabet {
    static func contains(_ byte: UInt8) -> Bool {
        (65...90).contains(byte) || (97...122).contains(byte) || (48...57).contains(byte) || byte == 45 || byte == 95
    }
}

/// A JWS whose chain and signature checked: its header, its decoded payload, and who signed it.
public struct VerifiedJWS: Sendable, Equatable {
    public var header: JSONValue
    /// The payload, a JSON object.
    public var payload: JSONValue
    /// The chain's subjects (common names), leaf first.
    public var chainSubjects: [String]
    /// When Apple signed it (``JWSSigningDate``: a 2022-format notification's is its nested
    /// transaction's), at which the chain was judged.
    public var signedDate: Date?

    /// Creates a verified JWS.
    public init(header: JSONValue, payload: JSONValue, chainSubjects: [String], signedDate: Date?) {
        self.header = header
        self.payload = payload
        self.chainSubjects = chainSubjects
        self.signedDate = signedDate
    }
}

/// What a signed payload must say to be this app's: checked after the signature.
public struct JWSExpectation: Sendable, Equatable {
    /// The app's bundle ids (its family); empty: not checked.
    public var bundleIDs: [String]
    /// Apple's app id, when known.
    public var appAppleID: Int64?
    /// `Production` or `Sandbox` (Apple's spelling), when the caller knows which it wants.
    public var environment: String?

    /// Creates an expectation.
    public init(bundleIDs: [String], appAppleID: Int64? = nil, environment: String? = nil) {
        self.bundleIDs = bundleIDs
        self.appAppleID = appAppleID
        self.environment = environment
    }

    /// The first mismatch, or nil. Reads the fields at the top level (transactions, renewal
    /// infos, app transactions) or under `data`, `summary` or `appData` (notifications).
    public func failure(for payload: JSONValue) -> JWSFailure? {
        let scope = payload["data"] ?? payload["summary"] ?? payload["appData"] ?? payload
        if !bundleIDs.isEmpty {
            // A renewal info carries no bundle id: nothing to compare.
            if let bundleID = scope["bundleId"]?.stringValue ?? payload["bundleId"]?.stringValue, !bundleIDs.contains(bundleID) {
                return .bundleIDMismatch
            }
        }
        if let appAppleID, let signed = (scope["appAppleId"] ?? payload["appAppleId"])?.stringValue, signed != String(appAppleID) {
            return .appAppleIDMismatch
        }
        if let environment, let signed = (scope["environment"] ?? payload["environment"])?.stringValue, signed != environment {
            return .environmentMismatch
        }
        return nil
    }
}
