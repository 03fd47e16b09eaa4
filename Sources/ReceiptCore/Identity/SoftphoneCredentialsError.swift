/// Why an app's Cloud Softphone credentials could not be set (`receiptq apps softphone-credentials`);
/// the username is checked before anything is stored.
public struct SoftphoneCredentialsError: Error, Equatable, CustomStringConvertible {
    private enum Code: String {
        case invalidUsername = "invalid_username"
        case usernameTaken = "username_taken"
        case weakPassword = "weak_password"
    }
    private let code: Code
    /// A sentence for the operator; never the password.
    public let message: String

    /// The username is not acceptable (see ``SoftphoneCredentials/problem(username:)``).
    public static func invalidUsername(_ reason: String) -> Self { Self(code: .invalidUsername, message: "username \(reason)") }
    /// Another app already uses the username.
    public static let usernameTaken = Self(code: .usernameTaken, message: "another app already uses this username")
    /// The password is shorter than ``SoftphoneCredentials/minimumPasswordLength`` characters: the
    /// softphone door is throttled, but a short password is still found by a patient guesser.
    public static let weakPassword = Self(
        code: .weakPassword,
        message: "the password must have at least \(SoftphoneCredentials.minimumPasswordLength) characters (a generated one is best)")

    /// A bounded code, e.g. `username_taken`.
    public var codeName: String { code.rawValue }
    public var description: String { message }
    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }
}
