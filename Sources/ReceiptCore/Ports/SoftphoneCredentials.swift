import Foundation

/// The credentials a Cloud Softphone app uses to call the provider web service
/// (`/cloudsoftphone/iap`) with HTTP Digest or Basic authentication.
///
/// Only the HA1 values of RFC 7616 are kept — `H(username ":" realm ":" password)` with MD5 and
/// with SHA-256 — never the password: they verify both Digest algorithms and Basic, and a
/// database leak gives no password that may be reused elsewhere. (An HA1 still authenticates to
/// this realm with Digest: treat it as a secret, never logged or shown.)
public struct SoftphoneCredentials: Sendable, Equatable, CustomStringConvertible {
    /// The realm every HA1 is computed in. Changing it invalidates every stored credential, so it
    /// is a constant rather than a setting.
    public static let realm = "receiptq"
    /// The fewest characters a softphone password may have (as an operator's).
    public static let minimumPasswordLength = 12

    /// The app the credentials belong to.
    public var app: AppRecord
    /// The username the softphone sends (unique across apps: it is what identifies the app).
    public var username: String
    /// MD5(username:realm:password), 16 bytes. Secret.
    public var ha1MD5: [UInt8]
    /// SHA-256(username:realm:password), 32 bytes. Secret.
    public var ha1SHA256: [UInt8]

    /// Creates credentials from stored values.
    public init(app: AppRecord, username: String, ha1MD5: [UInt8], ha1SHA256: [UInt8]) {
        self.app = app
        self.username = username
        self.ha1MD5 = ha1MD5
        self.ha1SHA256 = ha1SHA256
    }

    /// The bytes whose hash is HA1: `username:realm:password` in UTF-8 (RFC 7616 §3.4.2). Callers
    /// hash them with the algorithm at hand; ReceiptCore does no cryptography itself.
    public static func ha1Input(username: String, password: String, realm: String = realm) -> [UInt8] {
        Array("\(username):\(realm):\(password)".utf8)
    }

    /// Why `username` cannot be a softphone username, or nil when it can.
    ///
    /// 1–128 printable characters without `:` (Basic splits there), `"` or `\` (so it needs no
    /// escaping in a Digest header) or control characters.
    public static func problem(username: String) -> String? {
        guard !username.isEmpty, username.count <= 128 else { return "must be 1 to 128 characters" }
        let forbidden = username.unicodeScalars.contains { scalar in
            scalar == ":" || scalar == "\"" || scalar == "\\" || scalar.properties.generalCategory == .control
                || scalar == " "
        }
        return forbidden ? "must not contain spaces, control characters, ':', '\"' or '\\'" : nil
    }

    public var description: String {
        "SoftphoneCredentials(app: \(app.id), username: \(username), ha1: <redacted>)"
    }
}
