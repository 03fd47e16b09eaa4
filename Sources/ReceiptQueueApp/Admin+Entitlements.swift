import Foundation
import PostgresStore
import ReceiptCore

extension ReceiptQueueApp.Admin {
    var entitlementAdmin: EntitlementAdmin { EntitlementAdmin(connection: connection) }

    /// The app's entitlement catalogue.
    public func entitlementCatalogue(appID: UUID) throws -> [EntitlementDefinition] { try entitlementAdmin.catalogue(appID: appID) }

    /// Creates or replaces one entitlement (checked with ``EntitlementDefinition/validate(id:products:description:)`` first).
    public func defineEntitlement(_ definition: EntitlementDefinition, appID: UUID, audit: AuditAction) throws {
        try entitlementAdmin.define(definition, appID: appID, audit: audit)
    }

    /// Removes one entitlement. - Throws: ``EntitlementAdminError/unknownEntitlement``.
    public func removeEntitlement(_ id: String, appID: UUID, audit: AuditAction) throws {
        try entitlementAdmin.remove(entitlement: id, appID: appID, audit: audit)
    }

    /// The user's grants, newest first.
    public func entitlementGrants(appID: UUID, userIdentifier: String) throws -> [EntitlementGrant] {
        try entitlementAdmin.grants(appID: appID, userIdentifier: userIdentifier)
    }

    /// Grants an entitlement, with its event. - Throws: ``EntitlementAdminError/unknownEntitlement``.
    public func grantEntitlement(
        _ entitlement: String, userIdentifier: String, appID: UUID, expiresAt: Date?, reason: String?, audit: AuditAction
    ) throws -> EntitlementGrant {
        try entitlementAdmin.grant(
            entitlement: entitlement, userIdentifier: userIdentifier, appID: appID, expiresAt: expiresAt, reason: reason, audit: audit,
            at: Date())
    }

    /// Revokes a grant, with its event. - Throws: ``EntitlementAdminError/grantNotFound``.
    public func revokeEntitlementGrant(_ id: UUID, userIdentifier: String, appID: UUID, audit: AuditAction) throws -> EntitlementGrant {
        try entitlementAdmin.revoke(grant: id, userIdentifier: userIdentifier, appID: appID, audit: audit, at: Date())
    }
}
