import Dashboard
import Foundation
import OpenSSL
import PostgresStore
import ReceiptCore

extension ReceiptQueueApp.Admin {
    /// Whether `username` is the built-in admin's (`DASHBOARD_USERNAME`), which no account may take.
    public func isBuiltInAdmin(_ username: String) -> Bool {
        username.lowercased() == configuration.dashboard.admin.username.lowercased()
    }

    /// The built-in admin's username (`DASHBOARD_USERNAME`).
    public var builtInAdminUsername: String { configuration.dashboard.admin.username }

    /// The stored form of a new operator password: its scrypt hash.
    /// - Throws: ``OperatorAdminError/weakPassword`` below the minimum length.
    public func operatorPasswordHash(_ password: String) throws -> String {
        guard password.count >= OperatorAdmin.minimumPasswordLength else { throw OperatorAdminError.weakPassword }
        return PasswordHash.hash(password)
    }

    /// Adds an operator account; `passwordHash` comes from ``operatorPasswordHash(_:)``.
    /// - Throws: ``OperatorAdminError`` for an invalid or taken username.
    public func addOperator(username: String, role: OperatorRole, passwordHash: String, audit: AuditAction) throws {
        try OperatorAdmin(connection: connection).add(username: username, role: role, passwordHash: passwordHash, audit: audit)
    }

    /// Every operator account.
    public func listOperators() throws -> [OperatorAccount] { try OperatorAdmin(connection: connection).list() }

    /// Removes an operator account; its sessions end at once.
    /// - Throws: ``OperatorAdminError/notFound``.
    public func removeOperator(username: String, audit: AuditAction) throws {
        try OperatorAdmin(connection: connection).remove(username: username, audit: audit)
    }

    /// Sets a new password hash and/or role (nil keeps it); the account's sessions end at once.
    /// - Throws: ``OperatorAdminError/notFound``.
    public func resetOperator(username: String, passwordHash: String?, role: OperatorRole?, audit: AuditAction) throws {
        try OperatorAdmin(connection: connection).reset(username: username, passwordHash: passwordHash, role: role, audit: audit)
    }

    /// The audit log, newest first.
    public func audit(_ filter: AuditFilter, limit: Int) throws -> [AuditEntry] {
        try OperatorAdmin(connection: connection).audit(filter, limit: limit)
    }
}
