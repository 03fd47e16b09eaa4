import Foundation

/// Why an identity change of the client API cannot be made.
public enum CustomerIdentityError: Error, Sendable, Equatable {
    /// The app account token is already mapped to another customer (a token is issued for one user).
    case tokenTaken
    /// The alias is the customer it would be an alias of (after resolving aliases): a cycle.
    case aliasCycle
}

/// An app account token registered for a user, and the purchases it attached.
public struct TokenRegistration: Sendable, Equatable {
    public var appAccountToken: UUID
    /// The customer the token maps to (the user's canonical id, when the user is an alias).
    public var userIdentifier: String
    /// Purchases stored without a user (seen only through a notification or import) that carry the
    /// token and were attached to the user by this registration.
    public var attachedPurchases: Int

    /// Creates a registration.
    public init(appAccountToken: UUID, userIdentifier: String, attachedPurchases: Int) {
        self.appAccountToken = appAccountToken
        self.userIdentifier = userIdentifier
        self.attachedPurchases = attachedPurchases
    }
}

/// Two user ids merged into one customer.
public struct AliasMerge: Sendable, Equatable {
    /// The id that now answers as the customer.
    public var alias: String
    /// The customer's canonical id.
    public var userIdentifier: String
    /// The alias's purchases moved to the customer.
    public var movedPurchases: Int
    /// False when the two ids were one customer already (nothing changed, no event).
    public var created: Bool

    /// Creates a merge.
    public init(alias: String, userIdentifier: String, movedPurchases: Int, created: Bool) {
        self.alias = alias
        self.userIdentifier = userIdentifier
        self.movedPurchases = movedPurchases
        self.created = created
    }
}

/// Who a purchase belongs to, as the app tells it: app account tokens mapped to users, and user ids
/// merged into one customer. Each change is one transaction, with its event.
public protocol CustomerIdentity: Sendable {
    /// Maps `appAccountToken` to the user's customer and attaches, in the same transaction, the
    /// stored purchases without a user that carry it. Registering the same mapping again is a no-op.
    /// - Throws: ``CustomerIdentityError/tokenTaken`` when the token maps to another customer.
    func register(appAccountToken: UUID, userIdentifier: String, appID: UUID) async throws -> TokenRegistration
    /// Makes `alias` an alias of the user's customer (chains resolved: the alias's own aliases
    /// follow it), moving its purchases, subscriptions, shares, tokens and grants, with a
    /// `customer.aliased` event.
    /// - Throws: ``CustomerIdentityError/aliasCycle`` when the alias is the customer's own id.
    func alias(_ alias: String, userIdentifier: String, appID: UUID, at: Date) async throws -> AliasMerge
}
