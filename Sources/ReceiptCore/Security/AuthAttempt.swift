import Foundation

/// A place where a caller presents a credential. Each is throttled, logged and counted on its own
/// (the `door` label of `receiptq_auth_attempts_total`).
public enum AuthDoor: String, Sendable, CaseIterable {
    /// The admin API's HTTP Basic (`/admin/api/…`, and `receiptq dlq`, which calls it).
    case adminAPI = "admin_api"
    /// The dashboard's login form.
    case dashboardLogin = "dashboard_login"
    /// The Cloud Softphone web service (Digest, Basic, or an API token in `token=`).
    case softphone
    /// The client API's `Authorization: Bearer` token.
    case clientToken = "client_token"
    /// The token in an App Store Server Notifications URL.
    case notificationToken = "notification_token"

    /// Whether the door's secret is one a person chose (a password): such a door is throttled
    /// *before* the secret is checked, so that while throttled a right guess cannot be told apart
    /// from a wrong one. The other doors take generated 192-bit tokens, which nobody guesses: only
    /// wrong ones are counted, and a right one costs the throttle nothing.
    public var takesPasswords: Bool {
        switch self {
        case .adminAPI, .dashboardLogin, .softphone: true
        case .clientToken, .notificationToken: false
        }
    }

    /// The namespace of the account names presented here: an operator is one account whether
    /// guessed at the admin API or the login form, so both count against it.
    public var accounts: String {
        switch self {
        case .adminAPI, .dashboardLogin: "operator"
        case .softphone: "softphone"
        case .clientToken, .notificationToken: "token"
        }
    }
}

/// One presentation of a credential: where, from which client address, for which account.
public struct AuthAttempt: Sendable, Equatable {
    /// Where.
    public var door: AuthDoor
    /// The client's address as ``TrustedProxies`` resolved it (`unknown` when there is none).
    public var address: String
    /// The account named (a username, lower-cased), never the secret; nil at the token doors.
    public var account: String?

    /// Creates an attempt; an account name is lower-cased and cut to 64 characters, as the
    /// throttle keys and the logs hold it.
    public init(door: AuthDoor, address: String?, account: String? = nil) {
        self.door = door
        self.address = address.flatMap { $0.isEmpty ? nil : String($0.prefix(64)) } ?? "unknown"
        self.account = account.map { String($0.lowercased().prefix(64)) }
    }
}

/// Why a credential was refused (the `auth.reason` of the log line).
public enum AuthRefusal: String, Sendable, CaseIterable {
    /// No such account, token or URL token.
    case unknownCredential = "unknown_credential"
    /// The account exists; the password or digest is wrong.
    case wrongSecret = "wrong_secret"
    /// An `Authorization` header that cannot be read.
    case malformed
    /// A Digest response seen before.
    case replayed
    /// Authenticated, but the account's role does not allow the request (403).
    case forbidden

    /// Whether the refusal counts as a guess for the throttle. A refused privileged request (403)
    /// came with a right password: it is recorded, not throttled.
    public var isGuess: Bool { self != .forbidden }
}

/// What an authentication came to, as logged and counted.
public enum AuthOutcome: Sendable, Equatable {
    case granted
    case refused(AuthRefusal)
    /// Turned away before the secret was checked: too many failures; back in this many seconds.
    case throttled(retryAfter: Int)

    /// The `outcome` label of `receiptq_auth_attempts_total`.
    public var label: String {
        switch self {
        case .granted: "granted"
        case .refused(.forbidden): "forbidden"
        case .refused: "refused"
        case .throttled: "throttled"
        }
    }
}
