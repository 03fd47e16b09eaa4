/// Why an operator account could not be changed (bounded; never a password).
public struct OperatorAdminError: Error, Equatable, CustomStringConvertible {
    /// The closed set of reasons; `rawValue` is the stable string the API's JSON and the CLI show.
    public enum Code: String, Sendable {
        case invalidUsername = "invalid_username"
        case weakPassword = "weak_password"
        case exists
        case notFound = "not_found"
        case reserved
    }

    /// A bounded code: `invalid_username`, `weak_password`, `exists`, `not_found`, `reserved`.
    public let code: Code
    public let description: String

    public static let invalidUsername = Self(
        code: .invalidUsername, description: "a username is 1 to 64 characters: letters, digits, '.', '_', '-' or '@'")
    public static let weakPassword = Self(code: .weakPassword, description: "a password has at least 12 characters")
    public static let exists = Self(code: .exists, description: "an operator of that name exists")
    public static let notFound = Self(code: .notFound, description: "no such operator")
    public static let reserved = Self(
        code: .reserved, description: "that name is the built-in admin's (DASHBOARD_USERNAME): choose another")
}
