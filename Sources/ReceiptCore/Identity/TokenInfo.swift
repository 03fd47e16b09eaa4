import Foundation

/// One API token as `receiptq apps` shows it: never the token itself, which is not stored.
public struct TokenInfo: Sendable, Equatable {
    /// How many characters of a token are kept in clear to tell tokens apart: `rq_` and four more.
    public static let prefixLength = 7

    public var id: UUID
    /// The token's first ``prefixLength`` characters.
    public var prefix: String
    public var createdAt: Date
    /// When it was revoked; nil while it works.
    public var revokedAt: Date?

    /// Creates a token description.
    public init(id: UUID, prefix: String, createdAt: Date, revokedAt: Date?) {
        self.id = id
        self.prefix = prefix
        self.createdAt = createdAt
        self.revokedAt = revokedAt
    }

    /// Whether the token still authenticates.
    public var isActive: Bool { revokedAt == nil }
}
