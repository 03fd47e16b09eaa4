/// Why an app's registration, tokens or In-App Purchase key could not be changed (`receiptq apps`).
/// Compare with `==`; the description is safe to print.
public struct AppAdminError: Error, Equatable, CustomStringConvertible {
    private enum Code: Equatable {
        case malformedPrefix, noActiveToken, ambiguousPrefix, invalidBundleID, noSecretsKey, notAP256Key, invalidKeyField
    }

    private let code: Code

    /// The prefix is neither `rq_` and four characters nor a whole token.
    public static var malformedPrefix: Self { Self(code: .malformedPrefix) }
    /// No active token of the app starts with the prefix.
    public static var noActiveToken: Self { Self(code: .noActiveToken) }
    /// Several active tokens of the app start with the prefix: give the whole token instead.
    public static var ambiguousPrefix: Self { Self(code: .ambiguousPrefix) }

    /// A bundle id is not reverse-DNS text (letters, digits, `.`, `-`, at most 155 characters).
    public static var invalidBundleID: Self { Self(code: .invalidBundleID) }

    /// No `RECEIPTQ_SECRETS_KEY`: an In-App Purchase key cannot be stored (it is never stored in clear).
    public static var noSecretsKey: Self { Self(code: .noSecretsKey) }
    /// The key file is not an unencrypted PKCS#8 P-256 private key, as App Store Connect issues them.
    public static var notAP256Key: Self { Self(code: .notAP256Key) }
    /// The issuer id or key id is empty, too long, or not printable ASCII.
    public static var invalidKeyField: Self { Self(code: .invalidKeyField) }

    public var description: String {
        switch code {
        case .noSecretsKey: "set RECEIPTQ_SECRETS_KEY (32 random bytes, base64) to store In-App Purchase keys encrypted"
        case .notAP256Key: "the key file is not an In-App Purchase key (an unencrypted PKCS#8 P-256 private key, .p8)"
        case .invalidKeyField: "issuer and key ids are printable ASCII, 1 to 64 characters"
        case .invalidBundleID: "a bundle id is letters, digits, '.' and '-' (at most 155 characters), e.g. com.example.app"
        case .malformedPrefix: "a token prefix is `rq_` and 4 more characters (as `apps list` shows), or the whole token"
        case .noActiveToken: "the app has no active token with that prefix"
        case .ambiguousPrefix: "several active tokens of the app have that prefix: give the whole token"
        }
    }
}
