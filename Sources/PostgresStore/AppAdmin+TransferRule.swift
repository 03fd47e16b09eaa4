import Foundation
import Libpq
import ReceiptCore

extension AppAdmin {
    /// The app's transfer rule.
    /// - Throws: ``TransferRuleAdminError/unknownApp``.
    public func transferRule(appID: UUID) throws -> TransferRule {
        guard let text = try connection.query("SELECT transfer_rule FROM apps WHERE id = \(appID)").rows.first?.string("transfer_rule")
        else { throw TransferRuleAdminError.unknownApp }
        return TransferRule(rawValue: text) ?? .keepFirst
    }

    /// Sets the app's transfer rule and writes `audit`'s line, in one transaction.
    /// - Throws: ``TransferRuleAdminError/unknownApp``.
    public func setTransferRule(_ rule: TransferRule, appID: UUID, audit: AuditAction) throws {
        try connection.transaction { connection in
            let rows = try connection.query(
                "UPDATE apps SET transfer_rule = \(rule.rawValue), updated_at = now() WHERE id = \(appID) RETURNING id"
            ).rows
            guard !rows.isEmpty else { throw TransferRuleAdminError.unknownApp }
            var action = audit.with(target: "transfer_rule \(rule.rawValue)")
            action.appID = appID
            try AuditRows.begin(action, outcome: "done", on: connection)
        }
    }
}

/// ``TransferRuleAdministration`` and ``CustomerIdentity`` in Postgres, on the API's pool.
public struct PostgresIdentity: TransferRuleAdministration, CustomerIdentity {
    private let pool: PostgresConnectionPool

    /// Creates the store on `pool`.
    public init(pool: PostgresConnectionPool) { self.pool = pool }

    public func transferRule(appID: UUID) async throws -> TransferRule {
        try await pool.withConnection(.readOnly) { try AppAdmin(connection: $0).transferRule(appID: appID) }
    }

    public func setTransferRule(_ rule: TransferRule, appID: UUID, audit: AuditAction) async throws {
        try await pool.withConnection { try AppAdmin(connection: $0).setTransferRule(rule, appID: appID, audit: audit) }
    }

    public func register(appAccountToken: UUID, userIdentifier: String, appID: UUID) async throws -> TokenRegistration {
        try await pool.withConnection { connection in
            try connection.transaction { connection in
                try IdentityRows.register(appAccountToken: appAccountToken, userIdentifier: userIdentifier, appID: appID, on: connection)
            }
        }
    }

    public func alias(_ alias: String, userIdentifier: String, appID: UUID, at: Date) async throws -> AliasMerge {
        try await pool.withConnection { connection in
            try connection.transaction { connection in
                try IdentityRows.alias(alias, userIdentifier: userIdentifier, appID: appID, at: at, on: connection)
            }
        }
    }
}
