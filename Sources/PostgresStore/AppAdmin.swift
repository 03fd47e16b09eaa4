import Foundation
import Libpq
import OpenSSL
import ReceiptCore

/// `receiptq apps`: register apps and manage their API tokens.
public struct AppAdmin {
    private let connection: PostgresConnection

    /// Creates the admin on `connection`.
    public init(connection: PostgresConnection) { self.connection = connection }

    /// Registers an app and issues its first token.
    /// - Returns: the app and the token (shown once: only its hash is stored).
    public func addApp(
        name: String, bundleID: String, sharedSecret: String?, excludeOldTransactions: Bool = false
    ) throws -> (
        AppRecord, String
    ) {
        let app = AppRecord(
            id: JobID.make(), name: name, bundleID: bundleID, sharedSecret: sharedSecret,
            excludeOldTransactions: excludeOldTransactions)
        return try connection.transaction { connection in
            _ = try connection.query(
                """
                INSERT INTO apps (id, name, bundle_id, shared_secret, exclude_old_transactions)
                VALUES (\(app.id), \(name), \(bundleID), \(sharedSecret), \(excludeOldTransactions))
                """)
            return (app, try issueToken(appID: app.id, on: connection))
        }
    }

    /// Every registered app.
    public func listApps() throws -> [AppRecord] {
        try connection.query(
            "SELECT id, name, bundle_id, shared_secret, exclude_old_transactions FROM apps ORDER BY created_at"
        ).rows.compactMap(Self.appRecord)
    }

    /// The app called `name`.
    public func app(named name: String) throws -> AppRecord? {
        try connection.query(
            "SELECT id, name, bundle_id, shared_secret, exclude_old_transactions FROM apps WHERE name = \(name)"
        ).rows.first.flatMap(Self.appRecord)
    }

    /// Changes an app's shared secret (after a rotation in App Store Connect).
    public func setSharedSecret(appID: UUID, _ secret: String?) throws {
        _ = try connection.query("UPDATE apps SET shared_secret = \(secret), updated_at = now() WHERE id = \(appID)")
    }

    /// Issues a new token for an app; with `revokingOthers`, every older token stops working.
    public func rotateToken(appID: UUID, revokingOthers: Bool) throws -> String {
        try connection.transaction { connection in
            if revokingOthers {
                _ = try connection.query(
                    "UPDATE api_tokens SET revoked_at = now() WHERE app_id = \(appID) AND revoked_at IS NULL")
            }
            return try issueToken(appID: appID, on: connection)
        }
    }

    private func issueToken(appID: UUID, on connection: PostgresConnection) throws -> String {
        let token = "rq_" + Digest.hex(SecureRandom.bytes(24))
        _ = try connection.query(
            """
            INSERT INTO api_tokens (id, app_id, token_sha256, prefix)
            VALUES (\(JobID.make()), \(appID), \(Digest.sha256(Array(token.utf8))), \(String(token.prefix(7))))
            """)
        return token
    }

    static func appRecord(_ row: PostgresRow) -> AppRecord? {
        guard let id = row.uuid("id"), let name = row.string("name"), let bundleID = row.string("bundle_id") else {
            return nil
        }
        return AppRecord(
            id: id, name: name, bundleID: bundleID, sharedSecret: row.string("shared_secret"),
            excludeOldTransactions: row.bool("exclude_old_transactions") ?? false)
    }
}
