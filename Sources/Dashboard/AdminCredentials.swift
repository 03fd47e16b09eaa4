import Foundation
import OpenSSL

/// The operators' credentials (`DASHBOARD_USERNAME`, `DASHBOARD_PASSWORD`). Only the password's
/// SHA-256 is kept in memory, and every comparison takes the same time whatever it finds.
public struct AdminCredentials: Sendable, CustomStringConvertible {
    public let username: String
    private let usernameHash: [UInt8]
    private let passwordHash: [UInt8]
    /// The password's SHA-256, for keys that must change with it (the dashboard's session key).
    var passwordDigest: [UInt8] { passwordHash }

    /// Creates the credentials.
    public init(username: String, password: String) {
        self.username = username
        usernameHash = Digest.sha256(Array(username.utf8))
        passwordHash = Digest.sha256(Array(password.utf8))
    }

    /// Whether `username` and `password` are these.
    public func verify(username: String, password: String) -> Bool {
        // Both compared, always: which of the two was wrong is not leaked by the timing.
        let user = Digest.constantTimeEqual(Digest.sha256(Array(username.utf8)), usernameHash)
        let pass = Digest.constantTimeEqual(Digest.sha256(Array(password.utf8)), passwordHash)
        return user && pass
    }

    /// The username and password of an `Authorization: Basic …` header, if it is one.
    static func basic(_ header: String?) -> (username: String, password: String)? {
        guard let header, header.count < 1024, header.prefix(6).lowercased() == "basic ",
            let decoded = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
            let text = String(data: decoded, encoding: .utf8), let colon = text.firstIndex(of: ":")
        else { return nil }
        return (String(text[..<colon]), String(text[text.index(after: colon)...]))
    }

    public var description: String { "AdminCredentials(username: \(username), password: <redacted>)" }
}
