import Foundation
import Libpq
import ReceiptCore

/// The entitlement catalogue and grants on one connection (blocking): the statements behind
/// ``PostgresEntitlements`` and `receiptq entitlements`. Each change writes its audit line, and a
/// grant's or revocation's event (with its webhook deliveries), in its own transaction.
public struct EntitlementAdmin {
    let connection: PostgresConnection

    /// Works on `connection`.
    public init(connection: PostgresConnection) { self.connection = connection }

    /// The app's catalogue, by entitlement id.
    public func catalogue(appID: UUID) throws -> [EntitlementDefinition] { try Self.catalogue(appID: appID, on: connection) }

    /// Creates or replaces one entitlement.
    /// - Throws: ``EntitlementAdminError/unknownApp``.
    public func define(_ definition: EntitlementDefinition, appID: UUID, audit: AuditAction) throws {
        try connection.transaction { connection in
            guard !(try connection.query("SELECT 1 AS found FROM apps WHERE id = \(appID) FOR SHARE").rows.isEmpty) else {
                throw EntitlementAdminError.unknownApp
            }
            _ = try connection.query(
                """
                INSERT INTO entitlement_definitions (app_id, entitlement, products, description)
                VALUES (\(appID), \(definition.id), \(PostgresBinaryArray(texts: definition.products))::text[], \(definition.description))
                ON CONFLICT (app_id, entitlement) DO UPDATE SET products = excluded.products, description = excluded.description,
                    updated_at = now()
                """)
            try AuditRows.begin(Self.audit(audit, appID: appID, target: definition.id), outcome: "done", on: connection)
        }
    }

    /// Removes one entitlement.
    /// - Throws: ``EntitlementAdminError/unknownEntitlement``.
    public func remove(entitlement: String, appID: UUID, audit: AuditAction) throws {
        try connection.transaction { connection in
            let rows = try connection.query(
                "DELETE FROM entitlement_definitions WHERE app_id = \(appID) AND entitlement = \(entitlement) RETURNING entitlement"
            ).rows
            guard !rows.isEmpty else { throw EntitlementAdminError.unknownEntitlement }
            try AuditRows.begin(Self.audit(audit, appID: appID, target: entitlement), outcome: "done", on: connection)
        }
    }

    /// The user's grants, newest first.
    public func grants(appID: UUID, userIdentifier: String) throws -> [EntitlementGrant] {
        try Self.grants(appID: appID, userIdentifier: userIdentifier, on: connection)
    }

    /// Grants `entitlement` to the user, with its event.
    /// - Throws: ``EntitlementAdminError/unknownEntitlement``.
    public func grant(
        entitlement: String, userIdentifier: String, appID: UUID, expiresAt: Date?, reason: String?, audit: AuditAction, at: Date
    ) throws -> EntitlementGrant {
        try connection.transaction { connection in
            let defined = try connection.query(
                "SELECT 1 AS found FROM entitlement_definitions WHERE app_id = \(appID) AND entitlement = \(entitlement) FOR SHARE"
            ).rows
            guard !defined.isEmpty else { throw EntitlementAdminError.unknownEntitlement }
            var ids = MonotonicEventIDs()
            let grant = EntitlementGrant(
                id: ids.next(at: at), entitlement: entitlement, userIdentifier: userIdentifier, grantedAt: at, expiresAt: expiresAt,
                grantedBy: audit.actor, reason: reason)
            _ = try connection.query(
                """
                INSERT INTO entitlement_grants (id, app_id, user_identifier, entitlement, granted_at, expires_at, granted_by, reason)
                VALUES (\(grant.id), \(appID), \(userIdentifier), \(entitlement), \(at), \(expiresAt), \(grant.grantedBy), \(reason))
                """)
            try EventRows.insert([NewEvent.grant(.entitlementGranted, grant, appID: appID, id: ids.next(at: at), at: at)], on: connection)
            try AuditRows.begin(
                Self.audit(audit, appID: appID, target: "\(entitlement) \(grant.id.canonical)", user: userIdentifier), outcome: "done",
                on: connection)
            return grant
        }
    }

    /// Revokes one grant, with its event; a grant already revoked is answered as it is.
    /// - Throws: ``EntitlementAdminError/grantNotFound``.
    public func revoke(grant id: UUID, userIdentifier: String, appID: UUID, audit: AuditAction, at: Date) throws -> EntitlementGrant {
        try connection.transaction { connection in
            // The row lock orders this revocation's event after the grant's, and a second
            // revocation waits for the first and sees it.
            let rows = try connection.query(
                """
                SELECT \(unescaped: Self.columns) FROM entitlement_grants
                WHERE id = \(id) AND app_id = \(appID) AND user_identifier = \(userIdentifier) FOR UPDATE
                """
            ).rows
            guard var grant = rows.first.flatMap(Self.grant) else { throw EntitlementAdminError.grantNotFound }
            guard grant.revokedAt == nil else { return grant }
            grant.revokedAt = at
            grant.revokedBy = audit.actor
            _ = try connection.query("UPDATE entitlement_grants SET revoked_at = \(at), revoked_by = \(audit.actor) WHERE id = \(id)")
            var ids = MonotonicEventIDs()
            try EventRows.insert([NewEvent.grant(.entitlementRevoked, grant, appID: appID, id: ids.next(at: at), at: at)], on: connection)
            try AuditRows.begin(
                Self.audit(audit, appID: appID, target: "\(grant.entitlement) \(id.canonical)", user: userIdentifier), outcome: "done",
                on: connection)
            return grant
        }
    }

    // MARK: Rows

    static let columns = "id, user_identifier, entitlement, granted_at, expires_at, granted_by, reason, revoked_at, revoked_by"

    static func catalogue(appID: UUID, on connection: PostgresConnection) throws -> [EntitlementDefinition] {
        try connection.query(
            """
            SELECT entitlement, array_to_json(products)::text AS products, description FROM entitlement_definitions
            WHERE app_id = \(appID) ORDER BY entitlement
            """
        ).rows.compactMap { row in
            guard let id = row.string("entitlement"),
                let products = row.string("products").flatMap({ try? JSONDecoder().decode([String].self, from: Data($0.utf8)) })
            else { return nil }
            return EntitlementDefinition(id: id, products: products, description: row.string("description"))
        }
    }

    static func grants(appID: UUID, userIdentifier: String, on connection: PostgresConnection) throws -> [EntitlementGrant] {
        try connection.query(
            """
            SELECT \(unescaped: columns) FROM entitlement_grants WHERE app_id = \(appID) AND user_identifier = \(userIdentifier)
            ORDER BY granted_at DESC, id DESC LIMIT 1000
            """
        ).rows.compactMap(grant)
    }

    static func grant(_ row: PostgresRow) -> EntitlementGrant? {
        guard let id = row.uuid("id"), let user = row.string("user_identifier"), let entitlement = row.string("entitlement"),
            let grantedAt = row.date("granted_at"), let grantedBy = row.string("granted_by")
        else { return nil }
        return EntitlementGrant(
            id: id, entitlement: entitlement, userIdentifier: user, grantedAt: grantedAt, expiresAt: row.date("expires_at"),
            grantedBy: grantedBy, reason: row.string("reason"), revokedAt: row.date("revoked_at"), revokedBy: row.string("revoked_by"))
    }

    private static func audit(_ audit: AuditAction, appID: UUID, target: String, user: String? = nil) -> AuditAction {
        var action = audit.with(target: target)
        action.appID = appID
        if let user { action.userIdentifiers = [user] }
        return action
    }
}
