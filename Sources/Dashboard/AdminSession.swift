import Foundation
import OpenSSL
import ReceiptCore

/// The dashboard's signed session cookies and CSRF tokens. Stateless: a session is a random id, an
/// expiry and whose it is, signed with HMAC-SHA256, so any API replica sharing the key accepts it;
/// the operator's role is looked up on each request, never trusted from the cookie.
///
/// The signing key mixes `DASHBOARD_SESSION_SECRET` (or a random per-process secret when none is
/// configured) with the admin password's hash: changing the password ends every session.
public struct AdminSessions: Sendable {
    /// The session cookie's name.
    static let cookieName = "receiptq_admin"
    /// The login form's pre-session cookie (its CSRF token is bound to it).
    static let loginCookieName = "receiptq_login"

    private let key: [UInt8]
    /// How long a session lasts after logging in.
    public let lifetime: Duration
    /// Whether cookies carry `Secure` (HTTPS only): on in production, off for plain-HTTP development.
    public let secureCookies: Bool

    /// Creates the session keeper.
    /// - Parameters:
    ///   - credentials: the admin credentials (their password hash is mixed into the key).
    ///   - secret: a secret shared by every API replica; nil makes a random one for this process.
    ///   - lifetime: how long a session lasts (default 8 hours).
    ///   - secureCookies: whether cookies are sent over HTTPS only.
    public init(credentials: AdminCredentials, secret: [UInt8]?, lifetime: Duration = .seconds(8 * 3600), secureCookies: Bool) {
        key = credentials.sessionKey(secret: secret ?? SecureRandom.bytes(32))
        self.lifetime = lifetime
        self.secureCookies = secureCookies
    }

    /// A verified session: whose it is (the account's generation at login; 0 for the built-in
    /// admin), so that a reset, a new role or a removal ends it.
    struct Session: Equatable {
        var id: String
        var expiresAt: Date
        var username: String
        var generation: Int

        /// The CSRF token every form of this session carries.
        func csrfToken(key: [UInt8]) -> String { Digest.hex(Digest.hmacSHA256(key: key, Array("csrf:\(id)".utf8))) }
    }

    /// A new session's cookie value for `user`.
    func issue(for user: Operator, now: Date) -> (value: String, session: Session) {
        let session = Session(
            id: Digest.hex(SecureRandom.bytes(16)), expiresAt: now.addingTimeInterval(lifetime.seconds), username: user.username,
            generation: user.generation)
        let payload =
            "v2.\(session.id).\(Int64(session.expiresAt.timeIntervalSince1970)).\(session.generation).\(Digest.hex(Array(session.username.utf8)))"
        return (payload + "." + sign(payload), session)
    }

    /// The session a cookie value names, if its signature holds and it has not expired.
    func verify(_ value: String?, now: Date) -> Session? {
        guard let value, value.utf8.count < 512 else { return nil }
        let parts = value.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 6, parts[0] == "v2", parts[1].utf8.count == 32, let expiry = Int64(parts[2]), let generation = Int(parts[3]),
            generation >= 0
        else { return nil }
        let payload = parts[0..<5].joined(separator: ".")
        guard Digest.constantTimeEqual(Array(sign(payload).utf8), Array(parts[5].utf8)),
            let name = Digest.unhex(String(parts[4])).flatMap({ String(bytes: $0, encoding: .utf8) })
        else { return nil }
        let expiresAt = Date(timeIntervalSince1970: TimeInterval(expiry))
        guard expiresAt > now else { return nil }
        return Session(id: String(parts[1]), expiresAt: expiresAt, username: name, generation: generation)
    }

    /// The CSRF token of `session`'s forms.
    func csrfToken(for session: Session) -> String { session.csrfToken(key: key) }

    /// Whether `token` is `session`'s CSRF token (constant time).
    func verifyCSRF(_ token: String?, session: Session) -> Bool {
        guard let token else { return false }
        return Digest.constantTimeEqual(Array(token.utf8), Array(csrfToken(for: session).utf8))
    }

    /// A nonce for the login form's pre-session cookie, and the form's token bound to it.
    func loginChallenge() -> (nonce: String, token: String) {
        let nonce = Digest.hex(SecureRandom.bytes(16))
        return (nonce, loginToken(nonce))
    }

    /// Whether the login form's `token` was issued with the `nonce` its cookie carries.
    func verifyLogin(token: String?, nonce: String?) -> Bool {
        guard let token, let nonce, nonce.utf8.count == 32 else { return false }
        return Digest.constantTimeEqual(Array(token.utf8), Array(loginToken(nonce).utf8))
    }

    private func loginToken(_ nonce: String) -> String { Digest.hex(Digest.hmacSHA256(key: key, Array("login:\(nonce)".utf8))) }

    private func sign(_ payload: String) -> String { Digest.hex(Digest.hmacSHA256(key: key, Array(payload.utf8))) }

    /// A `Set-Cookie` value: HttpOnly, SameSite=Strict, scoped to `/admin`.
    func cookie(_ name: String, _ value: String, maxAge: Int) -> String {
        "\(name)=\(value); Path=/admin; Max-Age=\(maxAge); HttpOnly; SameSite=Strict\(secureCookies ? "; Secure" : "")"
    }
}

extension AdminCredentials {
    /// The session-signing key: `secret` keyed by the password's hash, so a new password (or a new
    /// secret) invalidates every cookie signed before.
    func sessionKey(secret: [UInt8]) -> [UInt8] { Digest.hmacSHA256(key: secret, passwordDigest) }
}

/// The fields of an `application/x-www-form-urlencoded` body or a query string; a name may repeat
/// (the checkboxes of a bulk action).
struct FormFields: Sendable, Equatable {
    private(set) var pairs: [(name: String, value: String)] = []

    init(_ text: String) {
        for part in text.split(separator: "&", omittingEmptySubsequences: true) {
            let pieces = part.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = Self.decode(pieces[0]) else { continue }
            pairs.append((name, pieces.count > 1 ? Self.decode(pieces[1]) ?? "" : ""))
        }
    }

    /// The first value of `name`.
    subscript(_ name: String) -> String? { pairs.first { $0.name == name }?.value }

    /// Every value of `name`, in order.
    func all(_ name: String) -> [String] { pairs.filter { $0.name == name }.map(\.value) }

    private static func decode(_ text: Substring) -> String? {
        text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }

    static func == (lhs: FormFields, rhs: FormFields) -> Bool {
        lhs.pairs.map(\.name) == rhs.pairs.map(\.name) && lhs.pairs.map(\.value) == rhs.pairs.map(\.value)
    }
}

/// The value of cookie `name` in a `Cookie` header.
func cookieValue(_ name: String, in header: String?) -> String? {
    guard let header else { return nil }
    for part in header.split(separator: ";") {
        let pair = part.trimmingCharacters(in: .whitespaces)
        if pair.hasPrefix(name + "=") { return String(pair.dropFirst(name.count + 1)) }
    }
    return nil
}
