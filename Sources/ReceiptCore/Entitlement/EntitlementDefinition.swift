import Foundation

/// One named entitlement of an app's catalogue: what the app unlocks (`pro`, `no_ads`), and the
/// products whose purchase or subscription grants it. A backend asks "is this user pro?" instead of
/// keeping its own table of product ids, and adding a product to a tier is one catalogue change.
public struct EntitlementDefinition: Sendable, Equatable {
    /// The entitlement's id: 1–64 characters of `a-z`, `0-9`, `_`, `-`, `.`.
    public var id: String
    /// The App Store product ids that grant it (at least one, at most ``maximumProducts``).
    public var products: [String]
    /// What it is, for operators (at most 200 characters).
    public var description: String?

    /// The most products one entitlement lists.
    public static let maximumProducts = 100

    /// Creates a definition; check it with ``validate(id:products:description:)`` first.
    public init(id: String, products: [String], description: String? = nil) {
        self.id = id
        self.products = products
        self.description = description
    }

    /// Why an entitlement id, its products or its description cannot be stored.
    public enum Problem: Error, Sendable, Equatable {
        case invalidID
        case noProducts
        case tooManyProducts
        case invalidProduct(String)
        case descriptionTooLong

        /// The request field the problem is about.
        public var field: String {
            switch self {
            case .invalidID: "entitlement"
            case .noProducts, .tooManyProducts, .invalidProduct: "products"
            case .descriptionTooLong: "description"
            }
        }

        /// What is wrong, for a 422.
        public var reason: String {
            switch self {
            case .invalidID: "must be 1–64 characters of a-z, 0-9, _, - and ."
            case .noProducts: "must list at least one product id"
            case .tooManyProducts: "must list at most \(EntitlementDefinition.maximumProducts) product ids"
            case .invalidProduct(let product): "'\(product.prefix(40))' is not a product id (1–255 printable characters, no spaces)"
            case .descriptionTooLong: "must be at most 200 characters"
            }
        }
    }

    /// Checks an entitlement id.
    public static func isValidID(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 64
            && id.utf8.allSatisfy { (97...122).contains($0) || (48...57).contains($0) || $0 == 95 || $0 == 45 || $0 == 46 }
    }

    /// A definition from an operator's input, or the first problem with it. Products are
    /// de-duplicated, in the order given.
    public static func validate(id: String, products: [String], description: String?) -> Result<EntitlementDefinition, Problem> {
        guard isValidID(id) else { return .failure(.invalidID) }
        var seen: Set<String> = []
        let unique = products.filter { seen.insert($0).inserted }
        guard !unique.isEmpty else { return .failure(.noProducts) }
        guard unique.count <= maximumProducts else { return .failure(.tooManyProducts) }
        if let bad = unique.first(where: { !isValidProduct($0) }) { return .failure(.invalidProduct(bad)) }
        if let description, description.count > 200 { return .failure(.descriptionTooLong) }
        return .success(EntitlementDefinition(id: id, products: unique, description: description?.isEmpty == true ? nil : description))
    }

    /// Apple's product ids are reverse-DNS-like strings; anything printable without spaces passes.
    static func isValidProduct(_ product: String) -> Bool {
        !product.isEmpty && product.utf8.count <= 255 && product.unicodeScalars.allSatisfy { $0.value > 32 && $0.value != 127 }
    }
}

/// An operator's grant of an entitlement to one user, until a date or for good, whatever the user
/// bought: a support gesture, a promotion, a partner's customer.
public struct EntitlementGrant: Sendable, Equatable {
    public var id: UUID
    public var entitlement: String
    public var userIdentifier: String
    public var grantedAt: Date
    /// Nil: until revoked.
    public var expiresAt: Date?
    /// The operator who granted it (`cli:…` from the command line).
    public var grantedBy: String
    public var reason: String?
    public var revokedAt: Date?
    public var revokedBy: String?

    /// Creates a grant.
    public init(
        id: UUID, entitlement: String, userIdentifier: String, grantedAt: Date, expiresAt: Date?, grantedBy: String, reason: String?,
        revokedAt: Date? = nil, revokedBy: String? = nil
    ) {
        self.id = id
        self.entitlement = entitlement
        self.userIdentifier = userIdentifier
        self.grantedAt = grantedAt
        self.expiresAt = expiresAt
        self.grantedBy = grantedBy
        self.reason = reason
        self.revokedAt = revokedAt
        self.revokedBy = revokedBy
    }

    /// Whether it entitles the user at `date`.
    public func isActive(at date: Date) -> Bool {
        revokedAt == nil && grantedAt <= date && (expiresAt.map { $0 > date } ?? true)
    }
}
