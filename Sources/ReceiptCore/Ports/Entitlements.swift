import Foundation

/// Why a change to an app's entitlements cannot be made.
public enum EntitlementAdminError: Error, Sendable, Equatable {
    /// No such app.
    case unknownApp
    /// No such entitlement in the app's catalogue (define it first).
    case unknownEntitlement
    /// No such grant of this user's.
    case grantNotFound
}

/// An app's entitlement catalogue and the grants operators make: the admin API's, the
/// dashboard's and the command line's one way to change them. Every change writes its audit line
/// (and a grant's or revocation's event) in its own transaction.
public protocol EntitlementAdministration: Sendable {
    /// The app's catalogue, by entitlement id.
    func catalogue(appID: UUID) async throws -> [EntitlementDefinition]
    /// Creates or replaces one entitlement.
    /// - Throws: ``EntitlementAdminError/unknownApp``.
    func define(_ definition: EntitlementDefinition, appID: UUID, audit: AuditAction) async throws
    /// Removes one entitlement (its grants stay, and entitle again if it is defined again).
    /// - Throws: ``EntitlementAdminError/unknownEntitlement``.
    func remove(entitlement: String, appID: UUID, audit: AuditAction) async throws
    /// The user's grants, newest first, revoked and expired ones included.
    func grants(appID: UUID, userIdentifier: String) async throws -> [EntitlementGrant]
    /// Grants `entitlement` to the user until `expiresAt` (nil: until revoked), with an
    /// `entitlement.granted` event.
    /// - Throws: ``EntitlementAdminError/unknownEntitlement``.
    func grant(
        entitlement: String, userIdentifier: String, appID: UUID, expiresAt: Date?, reason: String?, audit: AuditAction, at: Date
    ) async throws -> EntitlementGrant
    /// Revokes one grant, with an `entitlement.revoked` event; a grant already revoked is
    /// answered as it is, with no second event.
    /// - Throws: ``EntitlementAdminError/grantNotFound``.
    func revoke(grant: UUID, userIdentifier: String, appID: UUID, audit: AuditAction, at: Date) async throws -> EntitlementGrant
}

/// The read side of `GET /client/customers/{user}`: a user's holdings, the app's catalogue and
/// the user's grants, read together.
public protocol CustomerCatalog: Sendable {
    func customer(appID: UUID, userIdentifier: String) async throws -> CustomerResource
}
