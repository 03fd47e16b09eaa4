import Foundation
import Libpq
import ReceiptCore

/// ``EntitlementAdministration`` and ``CustomerCatalog`` in Postgres (`entitlement_definitions`,
/// `entitlement_grants`), on the API's pool: ``EntitlementAdmin``'s statements.
public struct PostgresEntitlements: EntitlementAdministration, CustomerCatalog {
    private let pool: PostgresConnectionPool

    /// Creates the store on `pool`.
    public init(pool: PostgresConnectionPool) { self.pool = pool }

    public func catalogue(appID: UUID) async throws -> [EntitlementDefinition] {
        try await pool.withConnection(.readOnly) { try EntitlementAdmin(connection: $0).catalogue(appID: appID) }
    }

    public func define(_ definition: EntitlementDefinition, appID: UUID, audit: AuditAction) async throws {
        try await pool.withConnection { try EntitlementAdmin(connection: $0).define(definition, appID: appID, audit: audit) }
    }

    public func remove(entitlement: String, appID: UUID, audit: AuditAction) async throws {
        try await pool.withConnection { try EntitlementAdmin(connection: $0).remove(entitlement: entitlement, appID: appID, audit: audit) }
    }

    public func grants(appID: UUID, userIdentifier: String) async throws -> [EntitlementGrant] {
        try await pool.withConnection(.readOnly) { try EntitlementAdmin(connection: $0).grants(appID: appID, userIdentifier: userIdentifier) }
    }

    public func grant(
        entitlement: String, userIdentifier: String, appID: UUID, expiresAt: Date?, reason: String?, audit: AuditAction, at: Date
    ) async throws -> EntitlementGrant {
        try await pool.withConnection {
            try EntitlementAdmin(connection: $0).grant(
                entitlement: entitlement, userIdentifier: userIdentifier, appID: appID, expiresAt: expiresAt, reason: reason, audit: audit,
                at: at)
        }
    }

    public func revoke(grant id: UUID, userIdentifier: String, appID: UUID, audit: AuditAction, at: Date) async throws -> EntitlementGrant {
        try await pool.withConnection {
            try EntitlementAdmin(connection: $0).revoke(grant: id, userIdentifier: userIdentifier, appID: appID, audit: audit, at: at)
        }
    }

    public func customer(appID: UUID, userIdentifier: String) async throws -> CustomerResource {
        try await pool.withConnection(.readOnly) { connection in
            // One transaction: the three reads see one another's commits alike.
            try connection.transaction { connection in
                // An alias answers as its customer: the canonical id's holdings and grants.
                let holdings = try SubscriptionRows.entitlements(connection, appID: appID, userIdentifier: userIdentifier)
                return CustomerResource(
                    holdings: holdings, catalogue: try EntitlementAdmin.catalogue(appID: appID, on: connection),
                    grants: try EntitlementAdmin.grants(appID: appID, userIdentifier: holdings.userIdentifier, on: connection))
            }
        }
    }
}
