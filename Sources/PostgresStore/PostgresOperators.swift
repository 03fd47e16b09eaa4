import Foundation
import Libpq
import ReceiptCore

/// The operator accounts and the audit log, for the dashboard and the admin API (on a pool).
public final class PostgresOperators: OperatorDirectory, AuditLog {
    private let pool: PostgresConnectionPool

    /// Creates them on `pool`.
    public init(pool: PostgresConnectionPool) { self.pool = pool }

    public func account(username: String) async throws -> OperatorAccount? {
        let name = username.lowercased()
        guard OperatorAdmin.isValidUsername(name) else { return nil }
        return try await pool.withConnection(.readOnly) { try OperatorAdmin(connection: $0).account(username: name) }
    }

    public func begin(_ action: AuditAction) async throws -> Int64 {
        try await pool.withConnection { try AuditRows.begin(action, on: $0) }
    }

    public func refused(_ action: AuditAction) async throws {
        try await pool.withConnection { try AuditRows.begin(action, outcome: "refused", on: $0) }
    }

    public func settle(_ id: Int64, jobCount: Int?, failed: Bool) async throws {
        try await pool.withConnection { try AuditRows.settle(id, jobCount: jobCount, failed: failed, on: $0) }
    }

    public func entries(_ filter: AuditFilter, before: Int64?, limit: Int) async throws -> [AuditEntry] {
        try await pool.withConnection { try AuditRows.entries(filter, before: before, limit: limit, on: $0) }
    }
}

/// The audit log's statements, shared by the pool's users and the command line.
enum AuditRows {
    static let columns =
        "id, at, actor, role, action, source, target, app_id, array_to_json(user_identifiers)::text AS users, job_count, outcome, client_address"

    /// Writes `action`'s line: `started` when the action runs after (and settles it), `done` when
    /// it is written in the action's own transaction.
    @discardableResult
    static func begin(_ action: AuditAction, outcome: String = "started", on connection: PostgresConnection) throws -> Int64 {
        let users = PostgresArray.literal(action.userIdentifiers.map { Optional($0) })
        let rows = try connection.query(
            """
            INSERT INTO audit_log (actor, role, action, source, target, app_id, user_identifiers, outcome, client_address)
            VALUES (\(action.actor), \(action.role?.rawValue), \(action.action), \(action.source), \(action.target), \(action.appID),
                    \(users)::text[], \(outcome), \(action.clientAddress))
            RETURNING id
            """
        ).rows
        return Int64(rows.first?.int("id") ?? 0)
    }

    /// Settles line `id`: `done` (with the jobs its action moved) or `failed`.
    static func settle(_ id: Int64, jobCount: Int?, failed: Bool, on connection: PostgresConnection) throws {
        _ = try connection.query("UPDATE audit_log SET job_count = \(jobCount), outcome = \(failed ? "failed" : "done") WHERE id = \(id)")
    }

    static func entries(_ filter: AuditFilter, before: Int64?, limit: Int, on connection: PostgresConnection) throws -> [AuditEntry] {
        // A family ("dead.") matches by prefix; the pattern's own wildcards are escaped.
        let action = filter.action.map { $0.hasSuffix(".") ? escapeLike($0) + "%" : escapeLike($0) }
        return try connection.query(
            """
            SELECT \(unescaped: columns) FROM audit_log
            WHERE (\(before)::bigint IS NULL OR id < \(before))
              AND (\(filter.actor)::text IS NULL OR actor = \(filter.actor))
              AND (\(action)::text IS NULL OR action LIKE \(action))
              AND (\(filter.userIdentifier)::text IS NULL OR user_identifiers @> ARRAY[\(filter.userIdentifier)::text])
            ORDER BY id DESC LIMIT \(max(1, min(limit, 1000)))
            """
        ).rows.compactMap(entry)
    }

    static func entry(_ row: PostgresRow) -> AuditEntry? {
        guard let id = row.int("id"), let at = row.date("at"), let actor = row.string("actor"), let action = row.string("action") else {
            return nil
        }
        let users = row.string("users").flatMap { try? JSONDecoder().decode([String].self, from: Data($0.utf8)) } ?? []
        return AuditEntry(
            id: Int64(id), at: at, actor: actor, role: row.string("role"), action: action, source: row.string("source") ?? "",
            target: row.string("target"), appID: row.uuid("app_id"), userIdentifiers: users, jobCount: row.int("job_count"),
            outcome: row.string("outcome") ?? "started", clientAddress: row.string("client_address"))
    }

    private static func escapeLike(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%").replacingOccurrences(of: "_", with: "\\_")
    }
}

/// `receiptq operators`: named accounts for the dashboard and the admin API, each change written
/// to the audit log in the same transaction.
public struct OperatorAdmin {
    let connection: PostgresConnection

    /// Creates the admin on `connection`.
    public init(connection: PostgresConnection) { self.connection = connection }

    /// Whether `name` (already lower case) can be a username.
    public static func isValidUsername(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count)
            && name.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || ".-_@".unicodeScalars.contains($0) }
    }

    /// The shortest password accepted.
    public static let minimumPasswordLength = 12

    /// Adds an account; `passwordHash` comes from `PasswordHash.hash`.
    public func add(username: String, role: OperatorRole, passwordHash: String, audit: AuditAction) throws {
        let name = username.lowercased()
        guard Self.isValidUsername(name) else { throw OperatorAdminError.invalidUsername }
        try connection.transaction { connection in
            let rows = try connection.query(
                """
                INSERT INTO operators (username, role, password_hash) VALUES (\(name), \(role.rawValue), \(passwordHash))
                ON CONFLICT (username) DO NOTHING RETURNING username
                """
            ).rows
            guard !rows.isEmpty else { throw OperatorAdminError.exists }
            try AuditRows.begin(audit.with(target: "\(name) as \(role.rawValue)"), outcome: "done", on: connection)
        }
    }

    /// Every account, by name.
    public func list() throws -> [OperatorAccount] {
        try connection.query("SELECT username, role, password_hash, generation, created_at FROM operators ORDER BY username").rows
            .compactMap(Self.account)
    }

    /// The account named `username` (lower case).
    public func account(username: String) throws -> OperatorAccount? {
        try connection.query(
            "SELECT username, role, password_hash, generation, created_at FROM operators WHERE username = \(username.lowercased())"
        ).rows.first.flatMap(Self.account)
    }

    /// Removes an account (its sessions end with it).
    public func remove(username: String, audit: AuditAction) throws {
        try connection.transaction { connection in
            let rows = try connection.query("DELETE FROM operators WHERE username = \(username.lowercased()) RETURNING username").rows
            guard !rows.isEmpty else { throw OperatorAdminError.notFound }
            try AuditRows.begin(audit.with(target: username.lowercased()), outcome: "done", on: connection)
        }
    }

    /// Sets a new password hash and, when given, a new role; either ends the account's sessions.
    public func reset(username: String, passwordHash: String?, role: OperatorRole?, audit: AuditAction) throws {
        try connection.transaction { connection in
            let rows = try connection.query(
                """
                UPDATE operators SET password_hash = COALESCE(\(passwordHash), password_hash), role = COALESCE(\(role?.rawValue), role),
                    generation = generation + 1, updated_at = now()
                WHERE username = \(username.lowercased()) RETURNING username
                """
            ).rows
            guard !rows.isEmpty else { throw OperatorAdminError.notFound }
            let what = [passwordHash.map { _ in "password" }, role.map { "role \($0.rawValue)" }].compactMap { $0 }.joined(separator: ", ")
            try AuditRows.begin(audit.with(target: "\(username.lowercased()): \(what)"), outcome: "done", on: connection)
        }
    }

    /// The audit log's newest entries (for `receiptq operators audit`).
    public func audit(_ filter: AuditFilter, limit: Int) throws -> [AuditEntry] {
        try AuditRows.entries(filter, before: nil, limit: limit, on: connection)
    }

    static func account(_ row: PostgresRow) -> OperatorAccount? {
        guard let name = row.string("username"), let role = row.string("role").flatMap(OperatorRole.init(rawValue:)),
            let hash = row.string("password_hash")
        else { return nil }
        return OperatorAccount(
            username: name, role: role, passwordHash: hash, generation: row.int("generation") ?? 1, createdAt: row.date("created_at") ?? Date())
    }
}
